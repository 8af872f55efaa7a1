"""K heads of one fusion run as one module: each fusion's forward written with a leading head axis,
as batched products (``sweep --pack K``, `layercache.training.packed`).

``stacked(fusion, params, buffers, hidden, mask)``:

- ``fusion``: a module of the heads' architecture (on the meta device: only its hyperparameters are read);
- ``params``/``buffers``: the K heads' tensors stacked ``[K, ...]`` (`torch.func.stack_module_state`),
  named as in ``fusion``;
- ``hidden``: ``[K, 1, R, L, d]``, head k's own packed rows (training), with ``lengths`` (K tensors:
  each head's sentence lengths, back to back from row 0) for heads that attend across a sentence; or,
  with ``shared``, ``[B, T, L, d]`` that every head reads (evaluation: each batch built once);
- returns ``[K, 1, R, d]`` or ``[K, B, T, d]``.

Why not `torch.vmap` over the solo forward: vmap turned DWAtt's per-layer products into slower
kernels than the solo ones and copied the stacked inputs around every product (a pack of 5 DWAtt
heads stepped no faster than 5 solo steps). Written out, each product is one `baddbmm` over K (for
shared input, one product K times wider), and the extra-layer head packs too: its attention has no
weights, so it runs per group of sentences of similar length across all K heads' rows at once. As
`DWAtt.values` does, everything runs in the autocast dtype with the weights cast once (autocast
off inside). Each function equals its fusion's forward head by head (tested). On a CPU the gain is
small: the step of a few-shot head is bound by memory traffic (its weights, their gradients, the
optimizer state, and element-wise passes over its activations), which K heads multiply by K;
packing saves only the per-call overhead (`docs/performance.md`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .base import Base
from .concat import Concat
from .dwatt import DWAtt, compute_dtype
from .extra import ExtraLayers, _grouped_attention, _length_groups
from .scalarmix import ScalarMix

# The fusions whose K heads also run stacked on one shared evaluation batch (64 sentences). DWAtt's
# per-layer tensors for K heads at once outgrew the caches there: one head after another was faster.
SHARED_INPUT = (Base, Concat, ScalarMix, ExtraLayers)


def stacked(fusion, params: dict, buffers: dict, hidden: Tensor, mask: Tensor, *, k: int, shared: bool = False,
            lengths: list[Tensor] | None = None) -> Tensor:
    """The ``k`` heads' fusion outputs (see the module's docstring)."""
    dtype = compute_dtype(hidden)
    rows = hidden.reshape(-1, *hidden.shape[-2:]) if shared else hidden.reshape(k, -1, *hidden.shape[-2:])
    with torch.autocast(hidden.device.type, enabled=False):
        rows = rows.to(dtype)
        w = {name: t.to(dtype) for name, t in params.items()}
        if isinstance(fusion, Base):
            out = rows[:, -1].expand(k, -1, -1) if shared else rows[..., -1, :]
        elif isinstance(fusion, Concat):
            out = linear(rows.flatten(-2), w["proj.weight"], w["proj.bias"], shared=shared)
        elif isinstance(fusion, ScalarMix):
            alpha = torch.softmax(_wide(params["weights"]), dim=-1).to(dtype)  # [K, L]
            out = torch.einsum("nld,kl->knd" if shared else "knld,kl->knd", rows, alpha) * w["gamma"][:, None, None]
        elif isinstance(fusion, DWAtt):
            if shared:
                raise ValueError("DWAtt evaluates one head after another (see SHARED_INPUT)")
            out = _dwatt(fusion, w, buffers["k_pos"].to(dtype), rows)
        elif isinstance(fusion, ExtraLayers):
            out = _extra(fusion, w, rows[..., -1, :], mask, k=k, shared=shared, lengths=lengths)
        else:
            raise TypeError(f"{type(fusion).__name__} has no stacked forward")
    lead = hidden.shape[:-2] if shared else hidden.shape[1:-2]  # (B, T) or (1, R)
    return out.reshape(k, *lead, out.shape[-1])


def linear(x: Tensor, weight: Tensor, bias: Tensor, *, shared: bool = False) -> Tensor:
    """``x @ W_k^T + b_k`` for every head: ``x [K, N, i]`` (or, shared, ``[N, i]``), weight ``[K, o, i]``
    -> ``[K, N, o]``. Shared input is one product with the K heads' weights side by side."""
    k, o, i = weight.shape
    if shared:
        wide = torch.addmm(bias.reshape(1, k * o), x, weight.reshape(k * o, i).T)  # [N, K*o]
        return wide.view(-1, k, o).transpose(0, 1)
    return _Linear.apply(x, weight.to(x.dtype), bias.to(x.dtype))  # autocast does not reach a backward


class _Linear(torch.autograd.Function):
    """Per-head ``baddbmm(b, x, W^T)`` whose weight gradient is computed as ``g^T x``, in the weight's
    own ``[K, o, i]`` layout. Autograd's own gave it transposed, and widening a transposed bfloat16
    gradient into the float32 weight cost more than the products themselves (a solo head's
    `F.linear` gets this right; batched products do not)."""

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        return torch.baddbmm(bias[:, None], x, weight.transpose(1, 2))

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, weight, _ = inputs
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        grad_x = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None
        grad_w = torch.bmm(grad.transpose(1, 2), x) if ctx.needs_input_grad[1] else None
        grad_b = grad.sum(1) if ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


def under(named: dict, prefix: str) -> dict:
    """The entries of ``named`` whose names start with ``prefix``, named without it."""
    return {name[len(prefix):]: t for name, t in named.items() if name.startswith(prefix)}


def _wide(x: Tensor) -> Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))  # bfloat16 -> float32; float64 stays


def _layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last axis, each head (and layer) its own affine pair, broadcast by the caller."""
    return torch.addcmul(bias, F.layer_norm(x, x.shape[-1:], eps=eps), weight)


def _dwatt(fusion: DWAtt, w: dict, k_pos: Tensor, rows: Tensor) -> Tensor:
    """`DWAtt.forward` for K heads: ``rows [K, N, L, d]`` -> ``[K, N, d]``."""
    k, L, m, d = *w["v_up_weight"].shape[:2], *w["v_down_weight"].shape[-2:]
    top = rows[..., -1, :]  # z_L: [K, N, d]
    n = top.shape[-2]
    # v_n = LN_n(f^V_n(z_n)), layer-major [K, L, N, *]: one product per (head, layer).
    x = rows.transpose(1, 2).reshape(k * L, n, d)
    up = torch.baddbmm(w["v_up_bias"].reshape(k * L, 1, m), x, w["v_up_weight"].reshape(k * L, d, m)).view(k, L, n, m)
    u = _layer_norm(F.gelu(up), w["v_mid_norm_weight"][:, :, None], w["v_mid_norm_bias"][:, :, None])
    v = torch.baddbmm(w["v_down_bias"].reshape(k * L, 1, d), u.reshape(k * L, n, m),
                      w["v_down_weight"].reshape(k * L, m, d))
    v = _layer_norm(v.view(k, L, n, d), w["v_norm_weight"][:, :, None], w["v_norm_bias"][:, :, None])
    # q = 1 + elu(z_L + f^Q(z_L)); k_n = W^K k^pos_n; softmax over layers of s(q, k_n).
    f = linear(top, w["query_mlp.up.weight"], w["query_mlp.up.bias"])  # [K, N, m]
    f = _layer_norm(F.gelu(f), w["query_mlp.norm.weight"][:, None], w["query_mlp.norm.bias"][:, None])
    f = linear(f, w["query_mlp.down.weight"], w["query_mlp.down.bias"])  # [K, N, d]
    query = 1 + F.elu(top + f)
    keys = linear(k_pos, w["key.weight"], w["key.bias"])  # [K, L, d]
    scores = torch.bmm(query, keys.transpose(1, 2))  # [K, N, L]
    if fusion.layer_score == "scaled":
        scores = scores * d ** -0.5
    elif fusion.layer_score == "learned":
        scores = scores * _wide(w["log_temperature"]).exp().to(scores.dtype)[:, None, None]
    weights = torch.softmax(_wide(scores), dim=-1).to(v.dtype)  # [K, N, L], the softmax in float32 at least
    return top + (weights.transpose(1, 2)[..., None] * v).sum(1)  # [K, N, d]


def _extra(fusion: ExtraLayers, w: dict, top: Tensor, mask: Tensor, *, k: int, shared: bool,
           lengths: list | None) -> Tensor:
    """`ExtraLayers.forward_packed` for K heads: ``top [K, R, d]`` packed rows with each head's
    ``lengths``; or shared ``[B*T, d]`` (a padded batch, ``mask [B, T]``): its real rows packed, the
    outputs put back in place (zeros at padding). Attention runs per group of sentences of similar
    length across all K heads' rows at once (it has no weights); everything else per head."""
    if shared:
        flat_mask = mask.reshape(-1)
        x = top[flat_mask].expand(k, -1, -1)  # [K, N, d]: the real rows, as every head's input
        lengths = [mask.sum(1).cpu().numpy()] * k  # evaluation of a pack: one copy per batch
    else:
        x = top
    n = x.shape[1]
    lengths = [np.asarray(ls, dtype=np.int64) for ls in lengths]  # host arrays: planned without the device
    starts = np.concatenate([k_ * n + np.cumsum(ls) - ls for k_, ls in enumerate(lengths)])
    groups = _length_groups(np.concatenate(lengths), device=x.device, starts=starts)
    for i, layer in enumerate(fusion.layers):
        p = under(w, f"layers.{i}.")
        qkv = linear(x, p["self_attn.in_proj_weight"], p["self_attn.in_proj_bias"])  # [K, N, 3d]
        drop = layer.self_attn.dropout if layer.training else 0.0
        attn = _grouped_attention(qkv.reshape(k * n, -1), groups, heads=layer.self_attn.num_heads, p=drop)
        attn = linear(attn.view(k, n, -1), p["self_attn.out_proj.weight"], p["self_attn.out_proj.bias"])
        x = _layer_norm(x + layer.dropout1(attn), p["norm1.weight"][:, None], p["norm1.bias"][:, None],
                        eps=layer.norm1.eps)
        ffn = layer.activation(linear(x, p["linear1.weight"], p["linear1.bias"]))
        ffn = linear(layer.dropout(ffn), p["linear2.weight"], p["linear2.bias"])
        x = _layer_norm(x + layer.dropout2(ffn), p["norm2.weight"][:, None], p["norm2.bias"][:, None],
                        eps=layer.norm2.eps)
    if not shared:
        return x
    out = x.new_zeros((k, flat_mask.shape[0], x.shape[-1]))
    out[:, flat_mask] = x
    return out
