"""K heads of one fusion run as one module: each fusion's forward written with a leading head axis,
as batched products (``sweep --pack K``, `layerfuse.training.packed`).

``stacked(fusion, params, buffers, hidden, mask)``:

- ``fusion``: a module of the heads' architecture (on the meta device: only its hyperparameters are read);
  its ``stacked_forward`` (declared in the fusion's own file, beside its forward: `Fusion`) computes;
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

import torch
import torch.nn.functional as F
from torch import Tensor


def stacked(fusion, params: dict, buffers: dict, hidden: Tensor, mask: Tensor, *, k: int, shared: bool = False,
            lengths: list[Tensor] | None = None) -> Tensor:
    """The ``k`` heads' fusion outputs (see the module's docstring): ``fusion.stacked_forward`` on the
    rows in the compute dtype, autocast off."""
    forward = fusion.stacked_forward
    if forward is None:
        raise TypeError(f"{type(fusion).__name__} has no stacked forward")
    if shared and not fusion.shares_evaluation_batch:
        raise ValueError(f"{type(fusion).__name__} evaluates one head after another (shares_evaluation_batch)")
    dtype = compute_dtype(hidden)
    rows = hidden.reshape(-1, *hidden.shape[-2:]) if shared else hidden.reshape(k, -1, *hidden.shape[-2:])
    with torch.autocast(hidden.device.type, enabled=False):
        out = forward(fusion, params, buffers, rows.to(dtype), mask, k=k, shared=shared, lengths=lengths)
    lead = hidden.shape[:-2] if shared else hidden.shape[1:-2]  # (B, T) or (1, R)
    return out.reshape(k, *lead, out.shape[-1])


def cast(params: dict, dtype: torch.dtype) -> dict:
    """The heads' tensors in the compute dtype, each cast once for the whole forward."""
    return {name: t.to(dtype) for name, t in params.items()}


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype autocast would compute products in here, or ``x``'s own outside autocast."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


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


def wide(x: Tensor) -> Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))  # bfloat16 -> float32; float64 stays


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last axis, each head (and layer) its own affine pair, broadcast by the caller."""
    return torch.addcmul(bias, F.layer_norm(x, x.shape[-1:], eps=eps), weight)
