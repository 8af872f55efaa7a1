"""How scores read in human-readable output: F1 in points (x100, one decimal), as the sweep reports
and the paper print it. Records, checkpoints and results files keep F1 as a fraction."""

from __future__ import annotations

F1_SCALE = 100.0


def f1_points(f1: float | None) -> str:
    """``0.19934`` -> ``'19.9'``; None (not measured) -> ``'-'``."""
    return "-" if f1 is None else f"{F1_SCALE * f1:.1f}"
