"""Which transformers the exported model supports: read off its version string, so asking imports nothing."""

from __future__ import annotations


def supported(version: str) -> bool:
    """transformers 5 or later: version 4 has no dataclass configs, so nothing is registered there."""
    return int(version.split(".")[0]) >= 5
