"""Library versions stored with every cache entry, result and checkpoint."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

LIBRARIES = ("layerfuse", "torch", "transformers", "zarr", "numpy", "seqeval", "safetensors")


def versions() -> dict:
    """``{library: version or None}`` for `LIBRARIES`, plus the Python version (no imports needed)."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["python"] = sys.version.split()[0]
    return out
