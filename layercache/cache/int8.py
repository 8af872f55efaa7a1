"""The 8-bit storage format (``extract --dtype int8``): each hidden vector (one row, one layer) is
stored as int8 with its own float32 scale, symmetric absmax:

    s = max|x| / 127 (1 where the vector is all zeros),  q = round(x / s),  x^ = q * s

so every element comes back within s / 2 = max|x| / 254 of the float32 value it was made from.
Scales are float32, not float16: float16 keeps 11 bits, so a float16 scale would add up to
0.05% of max|x| on top of that bound, and small vectors (max|x| < 0.008) would fall into
float16's subnormals and lose more; float32 costs 4 bytes per vector, under 1% of a 384-wide one.
"""

from __future__ import annotations

import numpy as np
import torch

SCALES = "hidden_scale"  # [rows, L+1] float32, next to ``hidden`` [rows, L+1, d] int8
QMAX = 127


def quantize(x: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[rows, L+1, d] float -> (q [rows, L+1, d] int8, s [rows, L+1] float32). Non-finite input
    gives a non-finite scale (extraction refuses such values before they get here)."""
    q, scale = quantize_tensor(torch.as_tensor(x))
    return q.cpu().numpy(), scale.cpu().numpy()


def quantize_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`quantize` on ``x``'s own device (extraction on a GPU quantises there: a quarter of the bytes
    of float32 cross to the host, and the host's writer thread only writes)."""
    x = x.float()
    # max|x| as the larger of max and -min: no |x| copy of the unit
    scale = torch.maximum(x.amax(dim=-1), x.amin(dim=-1).neg_()) / QMAX if x.shape[-1] else x.new_zeros(x.shape[:-1])
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    # x / s is at most 127 up to float32 rounding; the clamp keeps that rounding from ever wrapping.
    q = torch.div(x, scale[..., None]).round_().clamp_(-QMAX, QMAX).to(torch.int8)
    return q, scale


def dequantize(q: np.ndarray, scale: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """q [..., d] int8 and s [...] float32 -> q * s, computed in float32; into ``out`` (float16 or
    float32, any strides) when given, in one pass (torch's product, not numpy's widen-then-multiply,
    which made reading an int8 entry twice as slow as reading a float16 one)."""
    if out is None:
        out = np.empty(q.shape, dtype=np.float32)
    torch.mul(torch.from_numpy(q), torch.from_numpy(scale)[..., None], out=torch.from_numpy(out))
    return out
