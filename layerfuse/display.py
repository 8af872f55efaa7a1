"""How numbers read in human-readable output: F1 in points (x100, one decimal), as the sweep reports
and the paper print it (records, checkpoints and results files keep F1 as a fraction), and sizes in
bytes (the command line and the service's page)."""

from __future__ import annotations

F1_SCALE = 100.0


def f1_points(f1: float | None) -> str:
    """``0.19934`` -> ``'19.9'``; None (not measured) -> ``'-'``."""
    return "-" if f1 is None else f"{F1_SCALE * f1:.1f}"


def human_bytes(n: int | None) -> str:
    """``1536`` -> ``'1.5 KiB'``; None (not known) -> ``'?'``."""
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return str(n)
