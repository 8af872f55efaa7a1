"""DWAtt fusion (paper eqs. 3-11): depth-wise attention over the layers of each token."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layercache.errors import LayercacheError

POS_DIM = 24  # d_pos: width of the fixed random layer-position vectors k^pos_n


class DWAtt(nn.Module):
    """Each token attends over its own layers, with the top layer as a residual::

        f(x)   = W LN(gelu(U x))                  bottleneck MLP, U: d -> d/2, W: d/2 -> d
        k_n    = W^K k^pos_n                      k^pos_n ~ U(0, 1)^24, fixed; W^K affine 24 -> d
        v_n    = LN_n(f^V_n(z_n))                 one MLP and one LayerNorm per layer
        q      = 1 + elu(z_L + f^Q(z_L))
        h      = z_L + sum_n softmax_n(q . k_n) v_n

    The softmax runs over layers, per token, without a 1/sqrt(d) scale (as in the equations).
    ``k^pos`` is a buffer: not trained, but saved in the state_dict so a checkpoint reproduces it,
    and drawn from torch's current RNG so the seed fixes it. The L value MLPs are stored as batched
    weights (``[L, d, d/2]`` ...) for one einsum instead of a loop; their parameter count and
    initialisation equal L separate ``nn.Linear``/``nn.LayerNorm`` modules.
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
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        bottleneck = dim // 2
        if bottleneck < 1:
            raise LayercacheError(f"DWAtt needs dim >= 2 for its d/2 bottleneck, got dim={dim!r}")
        L, d, m = n_layers, dim, bottleneck
        self.register_buffer("k_pos", torch.rand(L, POS_DIM))  # [L, 24], U(0, 1), not trained
        self.key = nn.Linear(POS_DIM, d)  # W^K
        self.query_mlp = _MLP(d, m)  # f^Q
        # f^V_n for n = 1..L, batched: U_n [d, m], W_n [m, d], inner LN over m, outer LN_n over d.
        self.v_up_weight = nn.Parameter(torch.empty(L, d, m))
        self.v_up_bias = nn.Parameter(torch.empty(L, m))
        self.v_mid_norm_weight = nn.Parameter(torch.ones(L, m))
        self.v_mid_norm_bias = nn.Parameter(torch.zeros(L, m))
        self.v_down_weight = nn.Parameter(torch.empty(L, m, d))
        self.v_down_bias = nn.Parameter(torch.empty(L, d))
        self.v_norm_weight = nn.Parameter(torch.ones(L, d))  # LN_n
        self.v_norm_bias = nn.Parameter(torch.zeros(L, d))
        # nn.Linear's default init draws weight and bias from U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        for tensor, fan_in in (
            (self.v_up_weight, d),
            (self.v_up_bias, d),
            (self.v_down_weight, m),
            (self.v_down_bias, m),
        ):
            bound = 1.0 / math.sqrt(fan_in)
            nn.init.uniform_(tensor, -bound, bound)

    def values(self, hidden: Tensor) -> Tensor:
        """``v_n = LN_n(f^V_n(z_n))`` for every layer at once: ``[B, T, L, d] -> [B, T, L, d]``."""
        u = torch.einsum("btld,ldm->btlm", hidden, self.v_up_weight)  # [B, T, L, m]
        u = F.gelu(u + self.v_up_bias)
        u = _layer_norm(u, self.v_mid_norm_weight, self.v_mid_norm_bias)  # per-layer LN over m
        v = torch.einsum("btlm,lmd->btld", u, self.v_down_weight) + self.v_down_bias  # [B, T, L, d]
        return _layer_norm(v, self.v_norm_weight, self.v_norm_bias)  # per-layer LN over d

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (unused: attention is over layers, within a token)
        top = hidden[:, :, -1]  # z_L, [B, T, d]
        keys = self.key(self.k_pos.to(hidden.dtype))  # [L, d]
        query = 1 + F.elu(top + self.query_mlp(top))  # [B, T, d]
        scores = torch.einsum("btd,ld->btl", query, keys)  # [B, T, L]
        weights = torch.softmax(scores, dim=-1)  # over layers
        return top + torch.einsum("btl,btld->btd", weights, self.values(hidden))  # [B, T, d]


class _MLP(nn.Module):
    """``f(x) = W LN(gelu(U x))``, a ``d -> m -> d`` bottleneck."""

    def __init__(self, dim: int, bottleneck: int) -> None:
        super().__init__()
        self.up = nn.Linear(dim, bottleneck)  # U
        self.norm = nn.LayerNorm(bottleneck)
        self.down = nn.Linear(bottleneck, dim)  # W

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.norm(F.gelu(self.up(x))))


def _layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last axis with one affine pair per layer: x [..., L, k], weight [L, k]."""
    normed = F.layer_norm(x, x.shape[-1:], eps=eps)  # no affine: it differs per layer
    return normed * weight + bias
