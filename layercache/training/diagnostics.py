"""Which layers a trained head uses, in numbers a user can compare across fusions.

- DWAtt: the mean attention weight of each layer over the dev tokens, the mean entropy of a
  token's weights (nats; log L = uniform over L layers, 0 = one layer), and the mean weight of each
  token's top layer;
- ScalarMix: its mixing weights; Concat: the Frobenius norm of each layer's block ``W_n``;
- Base and the extra-layer head read the top layer alone: nothing to report.

``share`` is the same information on one scale for every fusion: non-negative, summing to 1 over
the fused layers (the weights themselves, or the block norms normalised), for heat maps.
"""

from __future__ import annotations

import torch

from .data import IGNORE, Split
from .evaluation import eval_batches


def layer_usage(tagger, split: Split, *, layers, device, batch_size: int, autocast) -> dict | None:
    """The usage record of ``tagger`` (at its current weights) on ``split``, or None."""
    fusion = tagger.fusion
    if hasattr(fusion, "layer_weights"):
        usage = _attention_usage(fusion, split, device=device, batch_size=batch_size, autocast=autocast)
        share = usage["mean_weight"]
    elif hasattr(fusion, "layer_usage"):
        usage = fusion.layer_usage()
        values = next(iter(usage.values()))
        share = [v / sum(values) for v in values] if sum(values) > 0 else values
    else:
        return None
    return {"layers": [int(x) for x in layers], **usage, "share": share}


def _attention_usage(fusion, split: Split, *, device, batch_size: int, autocast) -> dict:
    total, entropy, top, n = None, 0.0, 0.0, 0
    with torch.inference_mode(), autocast:
        for batch in eval_batches(split, device=device, batch_size=batch_size):
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
