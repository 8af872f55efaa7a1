"""Opening zarr groups on a local path or any fsspec URL zarr accepts."""

from __future__ import annotations

import os

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from ..errors import IncompleteEntryError, LayercacheError
from .layout import is_remote, local_path

# Every chunk carries a crc32c checksum so a flipped byte is caught on read.
CHECKSUM = Crc32cCodec()
SMALL_ARRAY_CODECS = [ZstdCodec(level=3), Crc32cCodec()]


def open_group(path: str, *, mode: str = "r") -> zarr.Group:
    """Open an existing group; a missing one is a LayercacheError naming the path."""
    target = path if is_remote(path) else local_path(path)
    try:
        return zarr.open_group(target, mode=mode)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError) as exc:
        raise LayercacheError(f"no cache entry at {path}") from exc


def exists(path: str) -> bool:
    if is_remote(path):
        try:
            zarr.open_group(path, mode="r")
            return True
        except Exception:
            return False
    return os.path.exists(os.path.join(local_path(path), "zarr.json"))


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 is stored as its uint16 bit pattern (numpy has no bfloat16); widen it exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16 bit pattern, as torch does."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16).view(torch.uint16).numpy()


def require_complete(group: zarr.Group, where: str) -> None:
    if not group.attrs.get("complete", False):
        raise IncompleteEntryError(
            f"{where} is incomplete (its extraction has not finished); "
            "rerun `extract` with the same options to resume it"
        )
