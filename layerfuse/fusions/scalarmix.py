"""ScalarMix fusion (ELMo; AllenNLP): a softmax-weighted average of the layers."""

import torch
from torch import Tensor, nn

from .fusion import Fusion, normalised
from .options import Style
from .stacked import wide


class ScalarMix(Fusion):
    """``h = gamma * sum_n softmax(w)_n z_n``, with ``w`` initialised to zeros and ``gamma`` to 1.

    Starting from zeros makes the initial mix the plain mean of the layers.
    """

    token_wise = True  # each token's output depends on that token alone: batches may be packed
    style = Style("C5", "P")
    shares_evaluation_batch = True
    fe_lr = 1e-2  # a handful of weights: ten times FE's default (docs/results/lr_sweep_conll.md)

    def __init__(self, *, n_layers: int) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(n_layers))  # [L]
        self.gamma = nn.Parameter(torch.ones(()))  # scalar

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (unused: the mix is per token)
        alpha = torch.softmax(self.weights, dim=0).to(hidden.dtype)  # [L]
        return self.gamma * torch.einsum("btld,l->btd", hidden, alpha)  # [B, T, d]

    @staticmethod
    def stacked_forward(fusion, params: dict, buffers: dict, rows: Tensor, mask: Tensor, *, k: int, shared: bool,
                        lengths) -> Tensor:
        """`forward` for K heads: ``rows [K, N, L, d]`` (or shared ``[N, L, d]``) -> ``[K, N, d]``."""
        alpha = torch.softmax(wide(params["weights"]), dim=-1).to(rows.dtype)  # [K, L], the softmax widened
        gamma = params["gamma"].to(rows.dtype)
        return torch.einsum("nld,kl->knd" if shared else "knld,kl->knd", rows, alpha) * gamma[:, None, None]

    def layer_usage(self, batches, *, autocast) -> dict:
        """The mixing weights ``softmax(w)``, and as the ``share``."""
        weight = torch.softmax(self.weights.detach().float(), dim=0).tolist()
        return {"weight": weight, "share": normalised(weight)}
