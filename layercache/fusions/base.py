"""Base fusion: the top selected layer alone."""

from torch import Tensor, nn


class Base(nn.Module):
    """``h = z_L``: no parameters; only the classifier on top trains."""

    token_wise = True  # each token's output depends on that token alone: batches may be packed
    top_layer_only = True  # reads z_L alone: a run holds and batches that one layer

    def __init__(self) -> None:
        super().__init__()

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (unused: the map is per token) -> [B, T, d]
        return hidden[:, :, -1]
