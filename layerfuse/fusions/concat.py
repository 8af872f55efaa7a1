"""Concat fusion (paper eq. 2): one affine map per layer, summed."""

import torch
from torch import Tensor, nn

from ..device import accumulator_dtype
from .fusion import Fusion, normalised
from .options import Style
from .stacked import cast, linear


class Concat(Fusion):
    """``h = sum_n W_n z_n + b``.

    Implemented as one ``nn.Linear(L*d, d)`` on the concatenation ``[z_1; ...; z_L]``: column block
    ``n`` of its weight is ``W_n``, and there is one shared bias.
    """

    token_wise = True  # each token's output depends on that token alone: batches may be packed
    style = Style("C1", "o")  # the DWAtt paper's colour for Concat: orange
    shares_evaluation_batch = True
    casts_stacked_weights = True  # stacked_forward: cast(params, rows.dtype) first

    def __init__(self, *, n_layers: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(n_layers * dim, dim)  # [d, L*d] weight

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (unused: the map is per token)
        concat = torch.flatten(hidden, start_dim=2)  # [B, T, L*d], layer-major like W's blocks
        return self.proj(concat)  # [B, T, d]

    @staticmethod
    def stacked_forward(fusion, params: dict, buffers: dict, rows: Tensor, mask: Tensor, *, k: int, shared: bool,
                        lengths) -> Tensor:
        """`forward` for K heads: ``rows [K, N, L, d]`` (or shared ``[N, L, d]``) -> ``[K, N, d]``."""
        w = cast(params, rows.dtype)
        return linear(rows.flatten(-2), w["proj.weight"], w["proj.bias"], shared=shared)

    def layer_usage(self, batches, *, autocast) -> dict:
        """``contribution``: the mean over the scored tokens of ``||W_n z_n||``, what each layer's block
        adds to a token's output (normalised, the ``share``); and ``block_norm``, the Frobenius norm
        of each block ``W_n``, which stays near its equal initialisation and says little."""
        contribution = self.contribution(batches, autocast=autocast)
        return {"block_norm": self.block_norms(), "contribution": contribution, "share": normalised(contribution)}

    def block_norms(self) -> list[float]:
        """``||W_n||`` (Frobenius) of each layer's block."""
        blocks = self.proj.weight.detach().float().unflatten(1, (-1, self.proj.out_features))  # [d, L, d]
        return blocks.norm(dim=(0, 2)).tolist()

    def contribution(self, batches, *, autocast=None) -> list[float]:
        """Mean over the scored tokens of ``||W_n z_n||`` for each layer n (no bias): the products in
        the run's precision (as its forward computes them), the norms summed in float32 and up."""
        dim = self.proj.out_features  # Concat maps L*d -> d
        dtype = getattr(autocast, "fast_dtype", None) or torch.float32
        blocks = self.proj.weight.detach().to(dtype).unflatten(1, (-1, dim))  # [d, L, d], blocks[:, n] = W_n
        with torch.no_grad():
            acc = accumulator_dtype(blocks.device)  # float64, or float32 where the device has none (MPS)
            total = torch.zeros(blocks.shape[1], dtype=acc, device=blocks.device)
            n = torch.zeros((), dtype=acc, device=blocks.device)
            for hidden, scored in batches:
                # Every row, the unscored ones weighted 0: a boolean selection would wait for the
                # device at each batch (its size is a device value), a pass on a GPU at each.
                z = hidden.reshape(-1, *hidden.shape[-2:]).to(dtype)  # [rows, L, d]
                weight = scored.reshape(-1).float()
                # one layer at a time: [rows, d] per layer rather than [rows, L, d] at once
                total += torch.stack([(z[:, i] @ blocks[:, i].T).float().norm(dim=-1) @ weight
                                      for i in range(len(total))]).to(acc)
                n += weight.sum()
        return (total / n.clamp_min(1)).tolist()  # the one wait for the device
