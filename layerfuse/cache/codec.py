"""The storage formats of the hidden states, one `Codec` per ``extract --dtype``: how a value is
stored, what it costs, how it is encoded and decoded, and which formats hold larger values.

Everything that differs between the formats lives here, so extraction, the writer, the reader,
the size estimate and `verify` ask the entry's codec instead of testing its name:

- float16, float32: stored as they are.
- bfloat16: stored as its uint16 bit pattern (numpy has no bfloat16), read back as float32.
- int8: each hidden vector (one row, one layer) with its own float32 scale, symmetric absmax:

      s = max|x| / 127 (1 where the vector is all zeros),  q = round(x / s),  x^ = q * s

  so every element comes back within s / 2 = max|x| / 254 of the float32 value it was made from.
  Scales are float32, not float16: float16 keeps 11 bits, so a float16 scale would add up to 0.05%
  of max|x| on top of that bound, and small vectors (max|x| < 0.008) would fall into float16's
  subnormals and lose more; float32 costs 4 bytes per vector, under 1% of a 384-wide one.

Decoding works on numpy arrays (the reader) and on torch tensors on any device (`decode_torch`:
a store that keeps int8 values on the GPU widens each batch there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .store import bfloat16_to_float32, float32_to_bfloat16_bits

SCALES = "hidden_scale"  # [rows, L+1] float32, next to ``hidden`` [rows, L+1, d] int8
QMAX = 127
DEFAULT_DTYPE = "float16"
FLOAT16_MAX = float(np.finfo(np.float16).max)  # 65504: an int8 entry with larger values reads as float32

if TYPE_CHECKING:
    import torch


def _torch():
    """torch, imported on first use: listing or checking a cache (`ls`, `info`, `rm`) reads numpy
    only and should not pay torch's import (seconds)."""
    import torch

    return torch


@dataclass(frozen=True)
class Codec:
    """A storage format whose values are stored as they are (float16, float32)."""

    name: str  # the ``--dtype`` and the entry's ``dtype`` attribute
    held_as: str  # the torch dtype that holds the stored values (`torch_dtype`)
    stored: str  # the numpy / zarr dtype of the ``hidden`` array
    encoded_as: str  # the torch dtype the forward pass hands to the writer (`encoded`)
    read_as: str  # the numpy dtype `decode` gives by default
    # Whether a unit is encoded where it was computed (on a GPU: fewer bytes cross to the host);
    # on the CPU the writer thread encodes it beside the next unit's forward pass.
    encodes_on_device: bool = False

    @property
    def torch_dtype(self) -> torch.dtype:
        """The stored values as torch holds them."""
        return getattr(_torch(), self.held_as)

    @property
    def encoded(self) -> torch.dtype:
        """What the forward pass hands to the writer (its overflow check is this dtype's)."""
        return getattr(_torch(), self.encoded_as)

    @property
    def value_bytes(self) -> int:
        return np.dtype(self.stored).itemsize

    @property
    def scale_bytes(self) -> int:
        """Bytes of the scale stored per vector (one row, one layer); 0 for unscaled formats."""
        return 0

    def encode(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Float values -> (stored values, scales or None). Values already stored pass through."""
        return x.astype(self.stored, copy=False), None

    def encode_torch(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`encode` on ``x``'s own device: (values in `torch_dtype`, scales or None)."""
        return x.to(self.torch_dtype), None

    def to_numpy(self, values: torch.Tensor) -> np.ndarray:
        """Values on the host as numpy holds them."""
        return values.numpy()

    def to_torch(self, values: np.ndarray) -> torch.Tensor:
        """Stored values (as read from the array) as a tensor in `torch_dtype`, sharing memory."""
        torch = _torch()
        return torch.from_numpy(values)

    def decode(self, values: np.ndarray, scales: np.ndarray | None = None, *,
               out: np.ndarray | None = None) -> np.ndarray:
        """Stored values [..., d] (and scales [...]) -> floats, into ``out`` when given."""
        if out is None:
            return values.astype(self.read_as, copy=False)
        out[...] = values
        return out

    def decode_torch(self, values: torch.Tensor, scales: torch.Tensor | None = None, *,
                     dtype: torch.dtype | None = None) -> torch.Tensor:
        """`decode` on ``values``' own device (CPU or GPU): [..., d] in ``dtype`` (float32 by default)."""
        return decode_torch(values, scales, dtype)

    def read_dtype(self, split_attrs: dict) -> np.dtype:
        """The dtype a split's hidden states are read as (``split_attrs``: the split's attributes)."""
        return np.dtype(self.read_as)

    def count_non_finite(self, stored: np.ndarray) -> int:
        """Values of ``stored`` (a chunk as stored) that read back inf or nan."""
        if stored.dtype.kind != "f":
            return 0
        return int(stored.size - np.count_nonzero(np.isfinite(stored)))

    def finish_attrs(self, scales: np.ndarray | None) -> dict:
        """What a finished split records about its stored values beside its run statistics."""
        return {}


class BFloat16Codec(Codec):
    """bfloat16 stored as its uint16 bit pattern, round-to-nearest-even as torch rounds."""

    def encode(self, x: np.ndarray) -> tuple[np.ndarray, None]:
        return (x if x.dtype == np.uint16 else float32_to_bfloat16_bits(x)), None

    def to_numpy(self, values: torch.Tensor) -> np.ndarray:
        torch = _torch()
        return (values.view(torch.uint16) if values.dtype == torch.bfloat16 else values).numpy()

    def to_torch(self, values: np.ndarray) -> torch.Tensor:
        torch = _torch()
        return torch.from_numpy(values).view(torch.bfloat16)

    def decode(self, values: np.ndarray, scales: np.ndarray | None = None, *,
               out: np.ndarray | None = None) -> np.ndarray:
        wide = bfloat16_to_float32(values)  # exact: bfloat16 is float32's upper half
        if out is None:
            return wide
        out[...] = wide
        return out

    def count_non_finite(self, stored: np.ndarray) -> int:
        if stored.dtype == np.uint16:  # the bits: an all-ones exponent is inf or nan
            return int(np.count_nonzero((stored & 0x7F80) == 0x7F80))
        return super().count_non_finite(stored)


# Above this share of int8 codes of a layer at 0 its vectors lost most of their precision: one absmax scale
# per vector makes the step max|x|/127, and a model with outlier dimensions (hundreds, where the rest are
# near 1) stores nearly all of its other values as 0. MiniLM's layers hold 2-3% zeros; with one outlier
# dimension 20 times the others' spread about 12% are 0 and the others' relative error is 0.09, at 100 times 57%.
ZERO_SHARE_WARNING = 0.10


class Int8Codec(Codec):
    """int8 with a float32 scale per vector (the module's docstring gives the rule and its bound)."""

    @property
    def scale_bytes(self) -> int:
        return np.dtype(np.float32).itemsize

    def encode(self, x: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[rows, L+1, d] float -> (q [rows, L+1, d] int8, s [rows, L+1] float32). Non-finite input
        gives a non-finite scale (extraction refuses such values before they get here)."""
        torch = _torch()
        q, scale = self.encode_torch(torch.as_tensor(x))
        return q.cpu().numpy(), scale.cpu().numpy()

    def encode_torch(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        torch = _torch()
        x = x.float()
        # max|x| as the larger of max and -min: no |x| copy of the unit
        if x.shape[-1]:
            scale = torch.maximum(x.amax(dim=-1), x.amin(dim=-1).neg_()) / QMAX
        else:
            scale = x.new_zeros(x.shape[:-1])
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        # x / s is at most 127 up to float32 rounding; the clamp keeps that rounding from ever wrapping.
        q = torch.div(x, scale[..., None]).round_().clamp_(-QMAX, QMAX).to(torch.int8)
        return q, scale

    def decode(self, values: np.ndarray, scales: np.ndarray | None = None, *,
               out: np.ndarray | None = None) -> np.ndarray:
        """q [..., d] int8 and s [...] float32 -> q * s, computed in float32; into ``out`` (float16 or
        float32, any strides) when given, in one pass (torch's product, not numpy's widen-then-multiply,
        which made reading an int8 entry twice as slow as reading a float16 one)."""
        torch = _torch()
        if out is None:
            out = np.empty(values.shape, dtype=np.float32)
        torch.mul(torch.from_numpy(values), torch.from_numpy(scales)[..., None], out=torch.from_numpy(out))
        return out

    def read_dtype(self, split_attrs: dict) -> np.dtype:
        """float16, as from a float16 entry, unless a value is beyond its range: then float32."""
        return np.dtype(np.float32 if split_attrs.get("int8_max_abs", 0) > FLOAT16_MAX else np.float16)

    def zero_counts(self, stored: np.ndarray) -> np.ndarray:
        """[L+1] how many codes of each layer are 0, of a block ``[rows, L+1, d]``: a vector whose scale
        a few outlier dimensions set stores most of its other values as 0 (see `ZERO_SHARE_WARNING`)."""
        # one layer at a time: count_nonzero over two axes at once cost most of what building the shard does
        return np.array([np.count_nonzero(stored[:, layer] == 0) for layer in range(stored.shape[1])])

    def finish_attrs(self, scales: np.ndarray | None) -> dict:
        """The largest stored magnitude (``scales``: the split's, [rows, L+1] float32, small), so
        readers widen past float16's range."""
        peak = float(scales.max()) if scales is not None and scales.size else 0.0
        return {"int8_max_abs": peak * QMAX}


CODECS: dict[str, Codec] = {codec.name: codec for codec in (
    Codec("float16", "float16", "float16", "float16", "float16"),
    BFloat16Codec("bfloat16", "bfloat16", "uint16", "bfloat16", "float32"),
    Codec("float32", "float32", "float32", "float32", "float32"),
    # int8 units leave the encoder in float32 (so the non-finite check is float32's) and are
    # quantised vector by vector: on a GPU where they were encoded, on the CPU by the writer.
    Int8Codec("int8", "int8", "int8", "float32", "float16", encodes_on_device=True),
)}
DTYPES = tuple(CODECS)


def codec_of(name: str) -> Codec:
    """The codec of storage dtype ``name``."""
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"storage dtype {name!r} is not one of {', '.join(CODECS)}") from None


def decode_torch(values: torch.Tensor, scales: torch.Tensor | None,
                 dtype: torch.dtype | None = None) -> torch.Tensor:
    """Stored values [..., d] as tensors (`Codec.torch_dtype`, on any device) -> ``dtype`` (float32 by
    default): scaled
    formats multiply by their per-vector ``scales`` [...] in float32 first (int8 * float32 promotes
    to float32 without a float32 copy of the values), as `Codec.decode` does on the host."""
    torch = _torch()
    if scales is not None:
        values = values * scales.to(torch.float32).unsqueeze(-1)
    return values.to(torch.float32 if dtype is None else dtype)


def wider_dtypes(encoded: torch.dtype) -> list[str]:
    """The float storage dtypes with a larger range than ``encoded`` (a codec's `Codec.encoded`):
    what to extract with when a value overflows it."""
    torch = _torch()
    largest = torch.finfo(encoded).max
    return [c.name for c in CODECS.values()
            if c.torch_dtype.is_floating_point and torch.finfo(c.torch_dtype).max > largest]


def first_overflow(peak: torch.Tensor, encoded: torch.dtype) -> int | None:
    """``peak``: each layer's largest magnitude before narrowing to ``encoded`` (nan if any value is
    nan). Rounding is monotone, so a layer fits iff its peak narrows to a finite value: one [L+1]
    comparison and one device sync. The first layer that does not fit, or None."""
    torch = _torch()
    fits = torch.isfinite(peak.to(encoded))
    if bool(fits.all()):
        return None
    return int(torch.nonzero(~fits.cpu())[0])
