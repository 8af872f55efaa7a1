"""How numbers read in human-readable output: F1 in points (x100, one decimal), as the sweep reports
and the paper print it (records, checkpoints and results files keep F1 as a fraction), and sizes in
bytes (the command line and the service's page); figures made outside pyplot and drawn without a warning
per missing glyph."""

from __future__ import annotations

import functools
import warnings

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


LISTED = 5  # the most items one message names: a root of 300 entries made a 37 KB line


def first_few(items: list[str], *, sep: str = "; ", rest: str = "") -> str:
    """``items`` joined by ``sep``, the first `LISTED` of them and "and N more" (then ``rest``, what lists
    them all) for the others."""
    shown = sep.join(items[:LISTED])
    return shown if len(items) <= LISTED else f"{shown} and {len(items) - LISTED} more{rest}"


def quiet_glyphs(draw):
    """``draw`` (a function that draws figures) without matplotlib's warning for each glyph its font lacks:
    a model or dataset named in CJK or with an emoji sent one per glyph and figure (15 lines a sweep) to
    stderr, where the boxes drawn say as much. Only while ``draw`` runs: the host's filters are left alone."""
    @functools.wraps(draw)
    def quietly(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from font")
            return draw(*args, **kwargs)
    return quietly


def new_figure(nrows: int = 1, ncols: int = 1, *, figsize, dpi: int = 100, **subplots):
    """(figure, axes): a matplotlib figure of its own, outside pyplot, so no backend is chosen or switched (a
    notebook's inline one stays; `matplotlib.use("Agg")` at import switched it for the whole process), no
    window opens, and nothing is left registered to close. ``subplots``: `Figure.subplots`' keywords."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    return fig, fig.subplots(nrows, ncols, **subplots)
