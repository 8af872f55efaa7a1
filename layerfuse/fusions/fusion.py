"""What every fusion in `FUSIONS` declares about itself: the one place the rest of the library (the
tagger, packed training, the layer-usage report, the command line) learns what a fusion can do.

A fusion is an ``nn.Module`` subclass of `Fusion` that sets the attributes below it differs in;
`Fusion` holds the defaults (a fusion that declares nothing trains alone, on padded batches, and
reports no layer usage):

- ``forward(hidden [B, T, L, d], mask [B, T]) -> [B, T, d]``: the head's single forward;
- ``token_wise``: each token's output depends on that token alone, so training batches may be
  packed (sentences back to back) and evaluation may read a cache's rows in order;
- ``forward_packed(hidden [1, R, L, d], lengths) -> [1, R, d]`` or None: the forward on packed
  sentences (``lengths``, a host array) for a fusion that is not token-wise;
- ``top_layer_only``: reads z_L alone, so a run holds and batches that one layer;
- ``reads_query_layer``: has a z_L at all (a query, a residual or an input), so a run may read the
  backbone's top layer as z_L (``--query-layer top``) instead of the last fused one;
- ``query_slices`` (per module): slices of ``hidden`` after the L fused layers that hold z_L alone
  and are not fused: 1 for a fusion built with ``query_layer="top"``, else 0;
- ``stacked_forward(fusion, params, buffers, rows, mask, *, k, shared, lengths) -> [K, N, d]`` or
  None: K heads as one module (``sweep --pack K``; `layerfuse.fusions.stacked` says what each
  argument holds), None = the fusion trains alone;
- ``casts_stacked_weights``: ``stacked_forward`` casts every weight to the rows' dtype before it
  uses any (`stacked.cast`), so a pack may hand it weights cast already, all in one cast;
- ``shares_evaluation_batch``: whether ``stacked_forward`` also runs on one evaluation batch that
  every head reads (``shared=True``); otherwise a pack scores its heads one after another;
- ``options``: its own settings, each an `Option` (`layerfuse.fusions.options`: its default, values,
  help text, ...), passed to its constructor by name: they get a command-line flag each, enter its
  runs' ids and report rows, a grid varies them for its runs alone, and other fusions' runs keep
  their defaults;
- ``fe_lr``: its learning rate in FE by default;
- ``citation``: the BibTeX of the paper it comes from, or None (a model card cites it);
- ``style``: how every plot draws its runs (a `Style`: colour, marker, legend label), the same in
  every panel and figure; its options' values may declare their own (`Option.styles`);
- ``layer_usage(batches, *, autocast) -> dict | None``: which fused layers the head uses, as a
  record ending with ``share`` (non-negative, summing to 1 over the fused layers), computed from
  ``batches`` (an iterable of ``(hidden [B, T, L, d], scored [B, T])`` over dev) when it needs the
  data; None = nothing to report (`layerfuse.training.diagnostics`).
"""

from __future__ import annotations

from torch import nn

from .options import Option, Style

# FE's default rate, from scripts/lr_sweep_conll.py (docs/results/lr_sweep_conll.md): fresh heads on
# frozen features barely move at the paper's 5e-5; heads of a handful of weights declare ten times more.
FE_LR = 1e-3


class Fusion(nn.Module):
    """The base of every fusion: the defaults of the declarations above."""

    token_wise = False
    forward_packed = None
    top_layer_only = False
    reads_query_layer = False
    stacked_forward = None
    shares_evaluation_batch = False
    casts_stacked_weights = False
    query_slices = 0
    options: tuple[Option, ...] = ()
    fe_lr = FE_LR
    citation: str | None = None
    style = Style()  # no colour or marker declared: plots pick them from a hash of its name

    def layer_usage(self, batches, *, autocast) -> dict | None:
        return None

    @classmethod
    def trains_packed(cls) -> bool:
        """Whether its training batches may be packed: token-wise, or with a packed forward."""
        return cls.token_wise or cls.forward_packed is not None

    @classmethod
    def packs(cls) -> bool:
        """Whether K heads of it train as one module (``sweep --pack K``)."""
        return cls.stacked_forward is not None


def normalised(values: list[float]) -> list[float]:
    """``values`` scaled to sum to 1 (a usage record's ``share``); all zeros stay zeros."""
    total = sum(values)
    return [v / total for v in values] if total > 0 else values
