"""The 8-bit storage format (``extract --dtype int8``) under its earlier names: the format itself,
its rule and its error bound are `layerfuse.cache.codec`'s int8 codec."""

from __future__ import annotations

import numpy as np
import torch

from .codec import CODECS, QMAX, SCALES  # noqa: F401 - names this module has always offered

_INT8 = CODECS["int8"]


def quantize(x: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[rows, L+1, d] float -> (q [rows, L+1, d] int8, s [rows, L+1] float32)."""
    return _INT8.encode(x)


def quantize_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`quantize` on ``x``'s own device."""
    return _INT8.encode_torch(x)


def dequantize(q: np.ndarray, scale: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """q [..., d] int8 and s [...] float32 -> q * s, computed in float32; into ``out`` when given."""
    return _INT8.decode(q, scale, out=out)
