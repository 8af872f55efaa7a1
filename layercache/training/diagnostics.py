"""Which layers a trained head uses, in numbers a user can compare across fusions.

- DWAtt: the mean attention weight of each layer over the dev tokens, the mean entropy of a
  token's weights (nats; log L = uniform over L layers, 0 = one layer), and the mean weight of each
  token's top layer;
- ScalarMix: its mixing weights;
- Concat (``h = sum_n W_n z_n + b``): ``contribution``, the mean over the dev tokens of
  ``||W_n z_n||``, what each layer's block adds to a token's output; and ``block_norm``, the
  Frobenius norm of each block ``W_n``, which stays near its equal initialisation and says little;
- Base and the extra-layer head read the top layer alone: nothing to report.

``share`` is the same information on one scale for every fusion: non-negative, summing to 1 over
the fused layers (the weights themselves, or Concat's contributions normalised), for heat maps. For
Concat it was the block norms normalised before contributions were measured: records written then
hold ``block_norm`` and no ``contribution``, and their ``share`` is of the block norms.
"""

from __future__ import annotations

import torch

from ..fusions.concat import Concat
from .data import IGNORE, Split
from .evaluation import eval_batches, rows_in_order


def layer_usage(tagger, split: Split, *, layers, device, batch_size: int, autocast) -> dict | None:
    """The usage record of ``tagger`` (at its current weights) on ``split``, or None."""
    fusion = tagger.fusion
    if hasattr(fusion, "layer_weights"):
        usage = _attention_usage(fusion, split, device=device, batch_size=batch_size, autocast=autocast)
        share = usage["mean_weight"]
    elif isinstance(fusion, Concat):
        usage = {**fusion.layer_usage(),
                 "contribution": _contribution(fusion, split, device=device, batch_size=batch_size,
                                               autocast=autocast)}
        share = _normalised(usage["contribution"])
    elif hasattr(fusion, "layer_usage"):
        usage = fusion.layer_usage()
        share = _normalised(next(iter(usage.values())))
    else:
        return None
    return {"layers": [int(x) for x in layers], **usage, "share": share}


def _normalised(values: list[float]) -> list[float]:
    total = sum(values)
    return [v / total for v in values] if total > 0 else values


def _contribution(fusion: Concat, split: Split, *, device, batch_size: int, autocast=None) -> list[float]:
    """Mean over the scored tokens of ``||W_n z_n||`` for each layer n (no bias): the products in the
    run's precision (as its forward computes them), the norms summed in float32 and up."""
    dim = fusion.proj.out_features  # Concat maps L*d -> d
    dtype = getattr(autocast, "fast_dtype", None) or torch.float32
    blocks = fusion.proj.weight.detach().to(dtype).unflatten(1, (-1, dim))  # [d, L, d], blocks[:, n] = W_n
    with torch.no_grad():
        total, n = torch.zeros(blocks.shape[1], dtype=torch.float64, device=blocks.device), 0
        for batch in _batches(split, device=device, batch_size=batch_size, autocast=autocast):
            z = batch.hidden[batch.labels != IGNORE].to(dtype)  # [tokens, L, d]
            # one layer at a time: [tokens, d] per layer rather than [tokens, L, d] at once
            total += torch.stack([(z[:, i] @ blocks[:, i].T).float().norm(dim=-1).sum()
                                  for i in range(len(total))]).double()
            n += len(z)
    return (total / max(n, 1)).tolist()


def _batches(split: Split, *, device, batch_size: int, autocast):
    """A cached split's rows in order (no padding, no gather; `rows_in_order`), a live one's batches."""
    if split.static:
        return rows_in_order(split, device=device, batch_size=batch_size, autocast=autocast)[1]
    return eval_batches(split, device=device, batch_size=batch_size)


def _attention_usage(fusion, split: Split, *, device, batch_size: int, autocast) -> dict:
    total, entropy, top, n = None, 0.0, 0.0, 0
    with torch.no_grad(), autocast:  # no_grad: autocast's weight casts kept for the pass
        for batch in _batches(split, device=device, batch_size=batch_size, autocast=autocast):
            weights = fusion.layer_weights(batch.hidden).float()[batch.labels != IGNORE]  # [tokens, L]
            total = weights.sum(0) if total is None else total + weights.sum(0)
            entropy += float(-(weights * weights.clamp_min(1e-12).log()).sum())
            top += float(weights.max(dim=1).values.sum())
            n += len(weights)
    n = max(n, 1)
    return {"mean_weight": (total / n).tolist(), "entropy": entropy / n, "top_weight": top / n}


def describe(usage: dict | None) -> str:
    """One short line for `train-head`'s printout."""
    if not usage:
        return "layers used: the top layer only"
    parts = " ".join(f"{layer}:{share:.2f}" for layer, share in zip(usage["layers"], usage["share"]))
    extra = (f" (entropy {usage['entropy']:.2f} nats, largest weight {usage['top_weight']:.2f})"
             if "entropy" in usage else "")
    return f"layers used (share): {parts}{extra}"
