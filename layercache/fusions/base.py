"""Base fusion: the top selected layer alone."""

from torch import Tensor, nn


class Base(nn.Module):
    """``h = z_L``: no parameters; only the classifier on top trains.

    Accepts the shared fusion keyword arguments (``n_layers``, ``dim``, ...) and ignores them, so
    every fusion can be built from the same plain dict.
    """

    token_wise = True  # each token's output depends on that token alone: batches may be packed

    def __init__(
        self,
        *,
        n_layers: int,
        dim: int,
        num_heads: int,
        ffn_dim: int,
        extra_layers: int | None = None,
        layer_score: str = "scaled",
        dropout: float = 0.1,
    ) -> None:
        super().__init__()

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (unused: the map is per token) -> [B, T, d]
        return hidden[:, :, -1]
