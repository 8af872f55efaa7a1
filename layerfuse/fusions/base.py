"""Base fusion: the top selected layer alone."""

from torch import Tensor

from .fusion import Fusion
from .options import Style


class Base(Fusion):
    """``h = z_L``: no parameters; only the classifier on top trains."""

    token_wise = True  # each token's output depends on that token alone: batches may be packed
    style = Style("C4", "v")
    top_layer_only = True  # reads z_L alone: a run holds and batches that one layer
    reads_query_layer = True  # z_L is the output
    shares_evaluation_batch = True
    fe_lr = 1e-2  # a handful of weights: ten times FE's default (docs/results/lr_sweep_conll.md)

    def __init__(self) -> None:
        super().__init__()

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (unused: the map is per token) -> [B, T, d]
        return hidden[:, :, -1]

    @staticmethod
    def stacked_forward(fusion, params: dict, buffers: dict, rows: Tensor, mask: Tensor, *, k: int, shared: bool,
                        lengths) -> Tensor:
        """``z_L`` for each of K heads: ``rows [K, N, L, d]`` (or shared ``[N, L, d]``) -> ``[K, N, d]``."""
        return rows[:, -1].expand(k, -1, -1) if shared else rows[..., -1, :]
