"""Small PNG plots for the CLI commands (matplotlib, Agg backend: no display is ever needed)."""

from __future__ import annotations

import math
import numbers
import os
import textwrap
import zlib
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

Scores = Sequence[tuple[int, float]]

__all__ = ["head_style", "legend_handles", "plot_scores"]

# One colour and marker per head, fixed by its name: a head looks the same in every panel and every
# figure of a report (and across reports), whichever heads a panel or a figure holds. A palette
# drawn in the order the heads appear would shift every head after a missing one.
HEAD_STYLES: dict[str, tuple[str, str]] = {
    "concat": ("C0", "o"),
    "dwatt": ("C1", "s"),
    "dwatt (scaled)": ("C1", "s"),  # the default score, spelt out by scripts that compare both
    "dwatt (paper)": ("C2", "^"),
    "extra": ("C3", "D"),
    "base": ("C4", "v"),
    "scalarmix": ("C5", "P"),
    "dwatt (learned)": ("C6", "X"),
}
_SPARE_COLOURS = ["C7", "C8", "C9", "#17becf", "#bcbd22", "#393b79", "#8c6d31", "#843c39"]
_SPARE_MARKERS = ["<", ">", "h", "*", "p", "d", "8", "H"]


def head_style(name: str) -> dict[str, str]:
    """``{"color", "marker"}`` of the head called ``name``: from `HEAD_STYLES` for the known heads,
    else chosen by a hash of the name (stable across processes and runs, unlike Python's ``hash``)."""
    if name in HEAD_STYLES:
        color, marker = HEAD_STYLES[name]
    else:
        h = zlib.crc32(name.encode("utf-8"))
        color, marker = _SPARE_COLOURS[h % len(_SPARE_COLOURS)], _SPARE_MARKERS[(h // 7) % len(_SPARE_MARKERS)]
    return {"color": color, "marker": marker}


def legend_handles(names) -> tuple[list, list[str]]:
    """Legend entries drawn from `head_style` itself, one per name (sorted): the legend cannot
    disagree with the lines, whichever panel drew them."""
    names = sorted(set(names))
    return [Line2D([], [], linewidth=1.2, markersize=3, **head_style(n)) for n in names], names


def _finite(scores: Scores) -> tuple[list[int], list[float]]:
    """inf (class means coincide) and non-positive values have no place on a log axis: dropped."""
    pts = [(int(layer), float(v)) for layer, v in scores if v is not None and math.isfinite(v) and v > 0]
    return [p[0] for p in pts], [p[1] for p in pts]


def _is_run(x) -> bool:
    """One run is a sequence of (layer, nu) pairs; several runs are a sequence of those."""
    return len(x) == 0 or isinstance(x[0][0], numbers.Real)


def plot_scores(scores: Scores | Mapping[str, Scores | Sequence[Scores]], *, title: str, path: str) -> str:
    """Plot nu against layer index on a log y-axis (nu spans orders of magnitude across layers).

    ``scores`` is one ``[(layer, nu), ...]`` or a mapping ``label -> scores``; a label may map to
    several runs (e.g. seeds), drawn as their geometric mean with a min-max band. Returns ``path``.
    """
    series = {"": scores} if not isinstance(scores, Mapping) else dict(scores)
    fig, ax = plt.subplots(figsize=(4.8, 3.2), dpi=100)
    for label, runs in series.items():
        runs = [runs] if _is_run(runs) else list(runs)
        per_layer: dict[int, list[float]] = {}
        for run in runs:
            for layer, v in zip(*_finite(run)):
                per_layer.setdefault(layer, []).append(v)
        xs = sorted(per_layer)
        mid = [math.exp(sum(map(math.log, per_layer[x])) / len(per_layer[x])) for x in xs]
        (line,) = ax.plot(xs, mid, marker="o", markersize=3, linewidth=1.2, label=label or None)
        if len(runs) > 1:
            ax.fill_between(xs, [min(per_layer[x]) for x in xs], [max(per_layer[x]) for x in xs],
                            color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_yscale("log")
    ax.set_xlabel("layer (0 = embeddings)")
    ax.set_ylabel("variability ν (lower = better)")
    ax.set_title(textwrap.fill(title, 60), fontsize=9)  # long model/dataset names must not be cut off
    plain = FuncFormatter(lambda v, _: f"{v:g}")  # 0.3 reads faster than 3 x 10^-1
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "235" else ""))
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, which="both", alpha=0.3, linewidth=0.5)
    if any(series):
        ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
