"""Concat fusion (paper eq. 2): one affine map per layer, summed."""

import torch
from torch import Tensor, nn


class Concat(nn.Module):
    """``h = sum_n W_n z_n + b``.

    Implemented as one ``nn.Linear(L*d, d)`` on the concatenation ``[z_1; ...; z_L]``: column block
    ``n`` of its weight is ``W_n``, and there is one shared bias.
    """

    token_wise = True  # each token's output depends on that token alone: batches may be packed

    def __init__(self, *, n_layers: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(n_layers * dim, dim)  # [d, L*d] weight

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (unused: the map is per token)
        concat = torch.flatten(hidden, start_dim=2)  # [B, T, L*d], layer-major like W's blocks
        return self.proj(concat)  # [B, T, d]

    def layer_usage(self) -> dict:
        """``||W_n||`` (Frobenius) of each layer's block: how much of each layer the map reads."""
        blocks = self.proj.weight.detach().float().unflatten(1, (-1, self.proj.out_features))  # [d, L, d]
        return {"block_norm": blocks.norm(dim=(0, 2)).tolist()}
