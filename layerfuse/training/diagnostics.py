"""Which layers a trained head uses, in numbers a user can compare across fusions.

Each fusion computes its own record (`Fusion.layer_usage`):

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

from .arrays import IGNORE, Split
from .evaluation import eval_batches, rows_in_order


def layer_usage(tagger, split: Split, *, layers, device, batch_size: int, autocast) -> dict | None:
    """The usage record of ``tagger`` (at its current weights) on ``split``, or None."""
    usage = tagger.fusion.layer_usage(_scored(split, device=device, batch_size=batch_size, autocast=autocast),
                                      autocast=autocast)
    if usage is None:
        return None
    fused = layers[:tagger.n_layers]  # a z_L read apart (`--query-layer top`) comes after them, not fused
    return {"layers": [int(x) for x in fused], **usage}


def _scored(split: Split, *, device, batch_size: int, autocast):
    """``(hidden, scored rows)`` of each batch of ``split``, built only when a fusion reads them."""
    for batch in _batches(split, device=device, batch_size=batch_size, autocast=autocast):
        yield batch.hidden, batch.labels != IGNORE


def _batches(split: Split, *, device, batch_size: int, autocast):
    """A cached split's rows in order (no padding, no gather; `rows_in_order`), a live one's batches."""
    if split.static:
        return rows_in_order(split, device=device, batch_size=batch_size, autocast=autocast)[1]
    return eval_batches(split, device=device, batch_size=batch_size)


def describe(usage: dict | None, *, z_layer: int | None = None) -> str:
    """One short line for `train-head`'s printout; ``z_layer``: the one layer a head without weights over
    layers reads (z_L: the top fused layer, or the backbone's top with ``--query-layer top``)."""
    if not usage:
        return f"layers used: layer {z_layer} only" if z_layer is not None else "layers used: the top layer only"
    parts = " ".join(f"{layer}:{share:.2f}" for layer, share in zip(usage["layers"], usage["share"]))
    extra = (f" (entropy {usage['entropy']:.2f} nats, largest weight {usage['top_weight']:.2f})"
             if "entropy" in usage else "")
    return f"layers used (share): {parts}{extra}"
