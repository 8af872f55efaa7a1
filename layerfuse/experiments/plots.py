"""Small PNG plots for the CLI commands (matplotlib figures outside pyplot: no display, no backend switched)."""

from __future__ import annotations

import math
import numbers
import os
import textwrap
import zlib
from collections.abc import Mapping, Sequence

from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from ..display import new_figure, quiet_glyphs
from ..files import figure_saved
from ..fusions.registry import FUSIONS

Scores = Sequence[tuple[int, float]]

__all__ = ["BAND_LABEL", "HEAD_STYLES", "band_handle", "head_label", "head_style", "legend_handles", "plot_scores"]

# The style table of every plot: one colour, marker and legend label per head, fixed by its name, so a
# head looks the same in every panel and every figure of a report (and across reports, and in the
# figures scripts/ draw), whichever heads a panel or a figure holds. A palette drawn in the order
# the heads appear would shift every head after a missing one. Each fusion declares its own look
# (`Fusion.style`) and that of its runs at some values of its settings (`Option.styles`, named as a
# report's row names them: "FUSION (VALUE)"); the label says what a curve is. A head declared by
# none gets a look from a hash of its name.
BAND_LABEL = "95% CI"  # what a shaded band or an error bar is, in every plot that draws one
BAND_ALPHA = 0.18
# Eight colours apart from the fusions' C0-C6 and from each other (C8 and C9 are #bcbd22 and #17becf: once both
# were listed, two heads could hash to one look), and eight shapes none of the fusions declares.
_SPARE_COLOURS = ["C7", "#17becf", "#bcbd22", "#393b79", "#8c6d31", "#843c39", "#637939", "#7b4173"]
_SPARE_MARKERS = ["<", ">", "h", "*", "p", "d", "+", "1"]


def _spare(name: str) -> tuple[str, str]:
    """(colour, marker) chosen by a hash of ``name`` (stable across processes and runs, unlike Python's ``hash``)."""
    h = zlib.crc32(name.encode("utf-8"))
    return _SPARE_COLOURS[h % len(_SPARE_COLOURS)], _SPARE_MARKERS[(h // 7) % len(_SPARE_MARKERS)]


def _declared_styles() -> dict[str, tuple[str, str, str]]:
    """{head name: (colour, marker, label)} of every fusion and of each value of its settings that
    declares a style, as the declarations say (what one leaves out: the fusion's, else the hash's)."""
    table = {}
    for fusion, cls in FUSIONS.items():
        own, spare = cls.style, _spare(fusion)
        colour, marker, label = own.colour or spare[0], own.marker or spare[1], own.label or fusion
        table[fusion] = (colour, marker, label)
        for option in cls.options:
            for value, style in option.styles:
                table[f"{fusion} ({value})"] = (style.colour or colour, style.marker or marker,
                                                f"{label}, {style.label or value}")
    return table


HEAD_STYLES: dict[str, tuple[str, str, str]] = _declared_styles()


def _declared_name(name: str) -> str | None:
    """The `HEAD_STYLES` name of the head called ``name``: itself, or "FUSION (VALUE)" for "FUSION (VALUE
    NOUN)", NOUN the last word of the setting's name, or "FUSION (SETTING VALUE)", the setting's name
    in words; None for a head no declaration names."""
    if name in HEAD_STYLES:
        return name
    fusion, _, rest = name.partition(" (")
    if not rest.endswith(")") or fusion not in FUSIONS:
        return None
    word = rest[:-1]
    for option in FUSIONS[fusion].options:
        for value, _ in option.styles:
            if word in (f"{value} {option.name.rpartition('_')[2]}", f"{option.name.replace('_', ' ')} {value}"):
                return f"{fusion} ({value})"
    return None


_VARIANT_LINES = ["--", ":", "-."]


def head_style(name: str) -> dict[str, str]:
    """``{"color", "marker"}`` of the head called ``name``: from `HEAD_STYLES` for the declared heads; a
    variant no declaration names ("FUSION (precision fp32)") keeps its fusion's colour, with a marker and a
    dashed line of its own chosen by a hash of the variant (a hash of the whole name gave two fusions'
    variants one colour); any other head, all chosen by a hash of its name."""
    declared = _declared_name(name)
    if declared:
        color, marker = HEAD_STYLES[declared][:2]
        return {"color": color, "marker": marker}
    fusion, _, rest = name.partition(" (")
    if fusion in HEAD_STYLES and rest.endswith(")"):
        marker = _spare(rest)[1]
        lines = _VARIANT_LINES[zlib.crc32(rest.encode("utf-8")) % len(_VARIANT_LINES)]
        return {"color": HEAD_STYLES[fusion][0], "marker": marker, "linestyle": lines}
    color, marker = _spare(name)
    return {"color": color, "marker": marker}


def head_label(name: str) -> str:
    """What the legend calls the head ``name`` (`HEAD_STYLES`; an undeclared head by its name)."""
    declared = _declared_name(name)
    return HEAD_STYLES[declared][2] if declared else name


def band_handle(what: str = BAND_LABEL):
    """A legend entry for the shaded bands (or error bars) of a plot, saying what they are."""
    from matplotlib.patches import Patch

    return Patch(facecolor="0.5", alpha=BAND_ALPHA * 2, linewidth=0, label=what)


def legend_handles(names, *, band: str | None = None) -> tuple[list, list[str]]:
    """Legend entries drawn from `head_style` itself, one per name (sorted), labelled by `head_label`:
    the legend cannot disagree with the lines, whichever panel drew them. ``band``: one more entry
    saying what the shaded bands are (e.g. "95% CI over 5 seeds")."""
    names = sorted(set(names))
    handles = [Line2D([], [], linewidth=1.2, markersize=3, **head_style(n)) for n in names]
    labels = [head_label(n) for n in names]
    if band:
        handles.append(band_handle(band))
        labels.append(band)
    return handles, labels


def _finite(scores: Scores) -> tuple[list[int], list[float]]:
    """inf (class means coincide) and non-positive values have no place on a log axis: dropped."""
    pts = [(int(layer), float(v)) for layer, v in scores if v is not None and math.isfinite(v) and v > 0]
    return [p[0] for p in pts], [p[1] for p in pts]


def _is_run(x) -> bool:
    """One run is a sequence of (layer, nu) pairs; several runs are a sequence of those."""
    return len(x) == 0 or isinstance(x[0][0], numbers.Real)


@quiet_glyphs
def plot_scores(scores: Scores | Mapping[str, Scores | Sequence[Scores]], *, title: str, path: str) -> str:
    """Plot nu against layer index on a log y-axis (nu spans orders of magnitude across layers).

    ``scores`` is one ``[(layer, nu), ...]`` or a mapping ``label -> scores``; a label may map to
    several runs (e.g. seeds), drawn as their geometric mean with a min-max band. Returns ``path``.
    """
    series = {"": scores} if not isinstance(scores, Mapping) else dict(scores)
    fig, ax = new_figure(figsize=(4.8, 3.2), dpi=100)
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
    ax.set_title(textwrap.fill(title, 60), fontsize=9,  # long model/dataset names must not be cut off
                 parse_math=False)  # and a $ in one is text, not TeX
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
    figure_saved(fig, path)
    return path
