"""ScalarMix fusion (ELMo; AllenNLP): a softmax-weighted average of the layers."""

import torch
from torch import Tensor, nn


class ScalarMix(nn.Module):
    """``h = gamma * sum_n softmax(w)_n z_n``, with ``w`` initialised to zeros and ``gamma`` to 1.

    Starting from zeros makes the initial mix the plain mean of the layers.
    """

    token_wise = True  # each token's output depends on that token alone: batches may be packed

    def __init__(self, *, n_layers: int) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(n_layers))  # [L]
        self.gamma = nn.Parameter(torch.ones(()))  # scalar

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (unused: the mix is per token)
        alpha = torch.softmax(self.weights, dim=0).to(hidden.dtype)  # [L]
        return self.gamma * torch.einsum("btld,l->btd", hidden, alpha)  # [B, T, d]

    def layer_usage(self) -> dict:
        """The mixing weights ``softmax(w)``."""
        return {"weight": torch.softmax(self.weights.detach().float(), dim=0).tolist()}
