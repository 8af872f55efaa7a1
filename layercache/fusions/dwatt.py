"""DWAtt fusion (paper eqs. 3-11): depth-wise attention over the layers of each token."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layercache.errors import LayercacheError

from .config import LAYER_SCORES

POS_DIM = 24  # d_pos: width of the fixed random layer-position vectors k^pos_n


class DWAtt(nn.Module):
    """Each token attends over its own layers, with the top layer as a residual::

        f(x)   = W LN(gelu(U x))                  bottleneck MLP, U: d -> d/2, W: d/2 -> d
        k_n    = W^K k^pos_n                      k^pos_n ~ U(0, 1)^24, fixed; W^K affine 24 -> d
        v_n    = LN_n(f^V_n(z_n))                 one MLP and one LayerNorm per layer
        q      = 1 + elu(z_L + f^Q(z_L))
        h      = z_L + sum_n softmax_n(s(q, k_n)) v_n

    The softmax runs over layers, per token. ``layer_score`` picks ``s``: ``"paper"`` is the
    equations' ``q . k_n``, unscaled; ``"scaled"`` (`FusionConfig`'s default) is ``q . k_n / sqrt(d)``;
    ``"learned"`` is ``q . k_n * exp(t)`` with a learned log-temperature ``t`` that starts at
    ``-log(sqrt(d))``. Why scale: ``q = 1 + elu(...)`` is about 1 in every dimension, so ``q . k_n`` is
    roughly the sum of ``k_n``'s entries, a per-layer constant whose spread across layers grows like
    ``sqrt(d)``: unscaled, the softmax is nearly one-hot on a seed-chosen layer from initialisation.
    ``k^pos`` is a buffer: not trained, but saved in the state_dict so a checkpoint reproduces it,
    and drawn from torch's current RNG so the seed fixes it. The L value MLPs are stored as batched
    weights (``[L, d, d/2]`` ...) for one batched product instead of a loop; their parameter count and
    initialisation equal L separate ``nn.Linear``/``nn.LayerNorm`` modules.
    """

    token_wise = True  # each token's output depends on that token alone: batches may be packed

    def __init__(self, *, n_layers: int, dim: int, layer_score: str) -> None:
        super().__init__()
        bottleneck = dim // 2
        if bottleneck < 1:
            raise LayercacheError(f"DWAtt needs dim >= 2 for its d/2 bottleneck, got dim={dim!r}")
        if layer_score not in LAYER_SCORES:
            raise LayercacheError(f"layer_score must be one of {', '.join(LAYER_SCORES)}, got {layer_score!r}")
        L, d, m = n_layers, dim, bottleneck
        self.layer_score = layer_score
        if layer_score == "learned":  # log-temperature, starting where "scaled" is
            self.log_temperature = nn.Parameter(torch.tensor(-0.5 * math.log(d)))
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
        """``v_n = LN_n(f^V_n(z_n))`` for every layer at once, layer-major: ``[B, T, L, d] -> [L, B*T, d]``.

        Layer-major, so each layer's rows are one matrix for `torch.baddbmm` (token-major input
        made einsum copy and permute ``[B, T, L, *]`` around each product). Under autocast all of
        it runs in the autocast dtype with the parameters cast once: autocast would run the norms
        in float32 and every mixed-dtype element-wise op on CPU's slow casting path (together, half
        of a step). Weights and their gradients stay in the parameters' dtype.
        """
        B, T, L, d = hidden.shape
        dtype = compute_dtype(hidden)
        w = {name: p.to(dtype) for name, p in self.named_parameters() if name.startswith("v_")}
        with torch.autocast(hidden.device.type, enabled=False):
            x = hidden.reshape(B * T, L, d).transpose(0, 1).to(dtype, memory_format=torch.contiguous_format)
            u = F.gelu(torch.baddbmm(w["v_up_bias"][:, None], x, w["v_up_weight"]))  # [L, BT, m]
            u = _layer_norm(u, w["v_mid_norm_weight"], w["v_mid_norm_bias"])  # per-layer LN over m
            v = torch.baddbmm(w["v_down_bias"][:, None], u, w["v_down_weight"])  # [L, BT, d]
            return _layer_norm(v, w["v_norm_weight"], w["v_norm_bias"])  # per-layer LN over d

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (unused: attention is over layers, within a token)
        B, T, L, d = hidden.shape
        top = hidden[:, :, -1]  # z_L, [B, T, d]
        values = self.values(hidden)  # [L, BT, d]
        weights = self.layer_weights(hidden).reshape(B * T, L).T.to(values.dtype)  # [L, BT], over layers
        return top + (weights[:, :, None] * values).sum(0).view(B, T, d)  # [B, T, d]

    def layer_weights(self, hidden: Tensor) -> Tensor:
        """``softmax_n(s(q, k_n))``, each token's attention over its layers: ``[B, T, L, d] -> [B, T, L]``."""
        top = hidden[:, :, -1]  # z_L, [B, T, d]
        keys = self.key(self.k_pos.to(hidden.dtype))  # [L, d]
        query = 1 + F.elu(top + self.query_mlp(top))  # [B, T, d]
        scores = self.scale(query @ keys.T)  # [B, T, L]
        wide = torch.promote_types(scores.dtype, torch.float32)  # the softmax in float32 at least
        return torch.softmax(scores.to(wide), dim=-1)

    def scale(self, scores: Tensor) -> Tensor:
        """``q . k_n`` -> the score the softmax over layers sees (see ``layer_score``)."""
        if self.layer_score == "scaled":
            return scores * self.key.out_features ** -0.5
        if self.layer_score == "learned":
            return scores * self.log_temperature.exp().to(scores.dtype)
        return scores


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype autocast would compute products in here, or ``x``'s own outside autocast."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


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
    """LayerNorm over the last axis with one affine pair per layer: x [L, rows, k], weight [L, k]."""
    normed = F.layer_norm(x, x.shape[-1:], eps=eps)  # no affine: it differs per layer
    return torch.addcmul(bias[:, None], normed, weight[:, None])
