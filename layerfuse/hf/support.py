"""Which transformers the exported model supports: read off its version string, so asking imports nothing."""

from __future__ import annotations

# The floor pyproject.toml declares (a test keeps the two alike): 5.0-5.3 count tokens otherwise, so an
# export there would not tag what `predict` tags; version 4 has no dataclass configs at all.
MINIMUM = (5, 4)
REQUIREMENT = "transformers>=" + ".".join(map(str, MINIMUM))


def supported(version: str) -> bool:
    """Whether transformers ``version`` is at least `MINIMUM`."""
    from packaging.version import Version

    return Version(version).release[:2] >= MINIMUM
