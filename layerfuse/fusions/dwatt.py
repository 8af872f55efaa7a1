"""DWAtt fusion (paper eqs. 3-11): depth-wise attention over the layers of each token."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layerfuse.device import accumulator_dtype
from layerfuse.errors import LayerfuseError

from .config import QUERY_LAYERS
from .fusion import Fusion
from .options import Option, Style
from .stacked import cast, compute_dtype, layer_norm, linear, wide

POS_DIM = 24  # d_pos: width of the fixed random layer-position vectors k^pos_n
LAYER_SCORES = ("paper", "scaled", "learned")  # the score s(q, k_n): see `DWAtt`
LAYER_SCORE = Option(
    "layer_score", "scaled", choices=LAYER_SCORES, before="paper", paper="paper",
    help="DWAtt's score over layers: paper = q.k (unscaled, eqs. 3-11), scaled = q.k/sqrt(d), learned = "
         "q.k times a learned temperature.",
    # "paper" is the paper's score at this project's rate, not the paper's result: the label says so
    styles=(("scaled", Style(label="scaled score")),  # the default, spelt out where both scores are drawn
            ("paper", Style("C2", "^", "paper's score")),
            ("learned", Style("C6", "X", "learned temperature"))))


class DWAtt(Fusion):
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
    initialisation equal L separate ``nn.Linear``/``nn.LayerNorm`` modules. With ``query_layer="top"``
    the head takes ``L + 1`` slices: the L fused layers (the values), then z_L alone (the query and
    the residual), which is not fused. The solo forward and
    the stacked one (K heads, `stacked_forward`) share each piece of the equations (``_values``,
    ``_query``, ``_scaled``, ``_over_layers``, ``_mix``); only the products differ (modules here,
    batched over the heads there).
    """

    token_wise = True  # each token's output depends on that token alone: batches may be packed
    casts_stacked_weights = True  # stacked_forward: cast(params, rows.dtype) first
    reads_query_layer = True  # z_L is the query and the residual
    options = (LAYER_SCORE,)  # runs before it existed, and the paper, ran the unscaled score
    style = Style("C0", "s")  # the DWAtt paper's colour for DWAtt: blue
    citation = """@inproceedings{elnokrashy-etal-2024-dwatt,
  title = {Depth-Wise Attention ({DWAtt}): A Layer Fusion Method for Data-Efficient Classification},
  author = {ElNokrashy, Muhammad and AlKhamissi, Badr and Diab, Mona},
  booktitle = {Proceedings of the 2024 Joint International Conference on Computational Linguistics,
               Language Resources and Evaluation (LREC-COLING 2024)},
  pages = {4665--4674},
  year = {2024},
  url = {https://aclanthology.org/2024.lrec-main.417},
}"""
    # K heads' per-layer tensors on one shared evaluation batch outgrew the caches: one head after
    # another was faster.
    shares_evaluation_batch = False

    def __init__(self, *, n_layers: int, dim: int, layer_score: str, query_layer: str) -> None:
        super().__init__()
        bottleneck = dim // 2
        if bottleneck < 1:
            raise LayerfuseError(f"DWAtt needs dim >= 2 for its d/2 bottleneck, got dim={dim!r}")
        LAYER_SCORE.check(layer_score)
        if query_layer not in QUERY_LAYERS:
            raise LayerfuseError(f"query_layer must be one of {', '.join(QUERY_LAYERS)}, got {query_layer!r}")
        self.query_slices = int(query_layer == "top")
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
        B, T, L, d = hidden.shape[0], hidden.shape[1], len(self.k_pos), hidden.shape[3]
        dtype = compute_dtype(hidden)
        w = {name: p.to(dtype) for name, p in self.named_parameters() if name.startswith("v_")}
        with torch.autocast(hidden.device.type, enabled=False):
            x = hidden[:, :, :L].reshape(B * T, L, d).transpose(0, 1).to(dtype, memory_format=torch.contiguous_format)
            return _values(x, w)  # [L, BT, d]

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        # hidden [B, T, L (+ query_slices), d], mask [B, T] (unused: attention is over layers, within a token)
        B, T, L, d = hidden.shape[0], hidden.shape[1], len(self.k_pos), hidden.shape[3]
        top = hidden[:, :, -1]  # z_L, [B, T, d]
        values = self.values(hidden)  # [L, BT, d]
        weights = self.layer_weights(hidden).reshape(B * T, L).T.to(values.dtype)  # [L, BT], over layers
        return _mix(top.reshape(B * T, d), weights, values).view(B, T, d)  # [B, T, d]

    def layer_weights(self, hidden: Tensor) -> Tensor:
        """``softmax_n(s(q, k_n))``, each token's attention over its layers: ``[B, T, L, d] -> [B, T, L]``."""
        top = hidden[:, :, -1]  # z_L, [B, T, d]
        keys = self.key(self.k_pos.to(hidden.dtype))  # [L, d]
        query = _query(top, self.query_mlp(top))  # [B, T, d]
        return _over_layers(self.scale(query @ keys.T))  # [B, T, L]

    def scale(self, scores: Tensor) -> Tensor:
        """``q . k_n`` -> the score the softmax over layers sees (see ``layer_score``)."""
        temperature = self.log_temperature if self.layer_score == "learned" else None
        return _scaled(scores, self.layer_score, dim=self.key.out_features, log_temperature=temperature)

    def layer_usage(self, batches, *, autocast) -> dict:
        """The mean attention weight of each layer over the scored tokens (also the ``share``), the
        mean entropy of a token's weights (nats) and the mean weight of its largest layer."""
        sums = None  # [L + 3]: each layer's weight, the entropy, the top weight, the tokens, summed
        with torch.no_grad(), autocast:  # no_grad: autocast's weight casts kept for the pass
            for hidden, scored in batches:
                # Every row, the unscored ones weighted 0: a boolean selection (or a float() per
                # batch) would wait for the device at each batch.
                weights = self.layer_weights(hidden).float()
                weights = weights.reshape(-1, weights.shape[-1])  # [rows, L]
                keep = scored.reshape(-1, 1).float()  # [rows, 1]
                per_row = torch.cat([weights, -(weights * weights.clamp_min(1e-12).log()).sum(1, keepdim=True),
                                     weights.max(dim=1, keepdim=True).values, torch.ones_like(keep)], dim=1)
                batch = (per_row * keep).to(accumulator_dtype(per_row.device)).sum(0)
                sums = batch if sums is None else sums + batch
        if sums is None:
            return {"mean_weight": [], "entropy": 0.0, "top_weight": 0.0, "share": []}
        *mean, entropy, top = (sums[:-1] / sums[-1].clamp_min(1)).tolist()  # the one wait for the device
        return {"mean_weight": mean, "entropy": entropy, "top_weight": top, "share": mean}

    @staticmethod
    def stacked_forward(fusion, params: dict, buffers: dict, rows: Tensor, mask: Tensor, *, k: int, shared: bool,
                        lengths) -> Tensor:
        """`forward` for K heads on their own rows: ``rows [K, N, L (+ query_slices), d]`` -> ``[K, N, d]``."""
        w = cast(params, rows.dtype)
        n, L, d = rows.shape[1], w["v_up_weight"].shape[1], rows.shape[-1]
        top = rows[..., -1, :]  # z_L: [K, N, d]
        # v_n, layer-major [K*L, N, *]: one product per (head, layer).
        x = rows[..., :L, :].transpose(1, 2).reshape(k * L, n, d)
        v = _values(x, {name: t.flatten(0, 1) for name, t in w.items() if name.startswith("v_")}).view(k, L, n, d)
        f = linear(top, w["query_mlp.up.weight"], w["query_mlp.up.bias"])  # f^Q(z_L): [K, N, m]
        f = layer_norm(F.gelu(f), w["query_mlp.norm.weight"][:, None], w["query_mlp.norm.bias"][:, None])
        f = linear(f, w["query_mlp.down.weight"], w["query_mlp.down.bias"])  # [K, N, d]
        keys = linear(buffers["k_pos"].to(rows.dtype), w["key.weight"], w["key.bias"])  # k_n: [K, L, d]
        temperature = wide(w["log_temperature"])[:, None, None] if fusion.layer_score == "learned" else None
        scores = _scaled(torch.bmm(_query(top, f), keys.transpose(1, 2)), fusion.layer_score, dim=d,
                         log_temperature=temperature)  # [K, N, L]
        weights = _over_layers(scores).to(v.dtype)  # [K, N, L]
        return _mix(top, weights.transpose(1, 2), v)  # [K, N, d]


def _values(x: Tensor, w: dict) -> Tensor:
    """``v_n = LN_n(f^V_n(z_n))`` for G stacks of rows at once (the L layers of one head, or of K heads):
    ``x [G, N, d]`` and the ``v_*`` weights ``[G, ...]`` -> ``[G, N, d]``, one `baddbmm` per product."""
    u = F.gelu(torch.baddbmm(w["v_up_bias"][:, None], x, w["v_up_weight"]))  # [G, N, m]
    u = layer_norm(u, w["v_mid_norm_weight"][:, None], w["v_mid_norm_bias"][:, None])  # per-layer LN over m
    v = torch.baddbmm(w["v_down_bias"][:, None], u, w["v_down_weight"])  # [G, N, d]
    return layer_norm(v, w["v_norm_weight"][:, None], w["v_norm_bias"][:, None])  # per-layer LN over d


def _query(top: Tensor, f: Tensor) -> Tensor:
    """``q = 1 + elu(z_L + f^Q(z_L))``, from z_L and ``f = f^Q(z_L)``."""
    return 1 + F.elu(top + f)


def _scaled(scores: Tensor, layer_score: str, *, dim: int, log_temperature: Tensor | None) -> Tensor:
    """``q . k_n`` -> the score the softmax over layers sees (`DWAtt`'s ``layer_score``)."""
    if layer_score == "scaled":
        return scores * dim ** -0.5
    if layer_score == "learned":
        return scores * log_temperature.exp().to(scores.dtype)
    return scores


def _over_layers(scores: Tensor) -> Tensor:
    """The softmax over layers (the last axis), in float32 at least."""
    return torch.softmax(wide(scores), dim=-1)


def _mix(top: Tensor, weights: Tensor, values: Tensor) -> Tensor:
    """``h = z_L + sum_n w_n v_n``: ``top [..., N, d]``, layer-major ``weights [..., L, N]`` and
    ``values [..., L, N, d]``."""
    return top + (weights[..., None] * values).sum(-3)


class _MLP(nn.Module):
    """``f(x) = W LN(gelu(U x))``, a ``d -> m -> d`` bottleneck."""

    def __init__(self, dim: int, bottleneck: int) -> None:
        super().__init__()
        self.up = nn.Linear(dim, bottleneck)  # U
        self.norm = nn.LayerNorm(bottleneck)
        self.down = nn.Linear(bottleneck, dim)  # W

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.norm(F.gelu(self.up(x))))
