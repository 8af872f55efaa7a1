"""The report of a probing run: per task, a table over layers (score, control accuracy, selectivity,
nu), the expected layers and the ScalarMix weights, all means over seeds, in ``probe.md``; and one
figure, ``probe.png``: tasks x layers, each task's scores scaled to its own min..max (tasks differ in
metric and difficulty; the row shows *where* a task is resolved), its expected layers marked, and
beside it the selectivity.

Scores are on dev (on the first split besides train where there is no dev); test scores, when there is
a test split, are shown beside them and used for nothing else. The single-layer expected layer is
taken on the seed-mean scores (one noisy seed's dips and gains partly cancel).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..cache.label_sets import SPAN
from ..display import new_figure, quiet_glyphs
from ..files import figure_saved, text_saved
from .expected import center_of_gravity, expected_layer
from .run import MIX


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


@dataclass
class TaskSummary:
    """One label set's results, means over its seeds."""

    name: str
    kind: str
    metric: str  # "f1" (span sets) or "acc" (token sets)
    split: str  # the split the scores are on
    layers: list[int]
    score: list[float | None]
    acc: list[float | None]
    control: list[float | None]
    nu: list[float | None]
    test: list[float | None] | None
    seeds: list[int]
    mix: dict = field(default_factory=dict)  # score, acc, control, test, weights, gamma, center_of_gravity

    @property
    def selectivity(self) -> list[float | None]:
        return [None if a is None or c is None else a - c for a, c in zip(self.acc, self.control)]

    @property
    def expected_layer(self) -> float | None:
        if not self.score or any(s is None for s in self.score):
            return None
        return expected_layer(self.score)


def summarize(records: list[dict]) -> list[TaskSummary]:
    """Per label set (in the order first met), the seed means of ``records`` (one run's records)."""
    out = []
    for name in dict.fromkeys(r["label_set"] for r in records):
        rs = [r for r in records if r["label_set"] == name]
        kind = rs[0]["kind"]
        metric = "f1" if kind == SPAN else "acc"
        splits = list(rs[0]["scores"])
        split = "dev" if "dev" in splits else splits[0]
        test = "test" if "test" in splits and split != "test" else None

        def mean(probe, control, what, where=split, rs=rs):
            return _mean(r["scores"].get(where, {}).get(what) if what != "nu" else r.get("nu")
                         for r in rs if str(r["probe"]) == str(probe) and r["control"] == control)

        layers = sorted({int(r["probe"]) for r in rs if r["probe"] != MIX})
        summary = TaskSummary(
            name=name, kind=kind, metric=metric, split=split, layers=layers,
            score=[mean(layer, False, metric) for layer in layers],
            acc=[mean(layer, False, "acc") for layer in layers],
            control=[mean(layer, True, "acc") for layer in layers],
            nu=[mean(layer, False, "nu") for layer in layers],
            test=[mean(layer, False, metric, test) for layer in layers] if test else None,
            seeds=sorted({int(r["seed"]) for r in rs}),
        )
        mixes = [r for r in rs if r["probe"] == MIX and not r["control"]]
        if mixes:
            weights = np.mean([r["mix_weights"] for r in mixes], axis=0).tolist()
            summary.mix = {"score": mean(MIX, False, metric), "acc": mean(MIX, False, "acc"),
                           "control": mean(MIX, True, "acc"), "test": mean(MIX, False, metric, test) if test else None,
                           "weights": weights, "gamma": _mean(r["gamma"] for r in mixes),
                           "center_of_gravity": center_of_gravity(weights)}
        out.append(summary)
    return out


def _f(value, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _g(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def task_table(task: TaskSummary) -> list[str]:
    """The markdown lines of one task: its table, expected layers and mixing weights."""
    head = f"{task.metric} ({task.split})"
    cols = ["layer", head] + ([f"acc ({task.split})"] if task.metric != "acc" else []) + [
        "control acc", "selectivity", "nu"] + ([f"{task.metric} (test)"] if task.test else [])
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---:" for _ in cols) + "|"]

    def row(label, score, acc, control, nu, test):
        sel = None if acc is None or control is None else acc - control
        cells = [label, _f(score)] + ([_f(acc)] if task.metric != "acc" else []) + [_f(control), _f(sel), _g(nu)]
        return "| " + " | ".join(cells + ([_f(test)] if task.test else [])) + " |"

    for i, layer in enumerate(task.layers):
        lines.append(row(str(layer), task.score[i], task.acc[i], task.control[i], task.nu[i],
                         task.test[i] if task.test else None))
    if task.mix:
        m = task.mix
        lines.append(row("mix", m["score"], m["acc"], m["control"], None, m.get("test")))
    lines.append("")
    lines.append(f"Expected layer: ScalarMix center of gravity {_f(task.mix.get('center_of_gravity'), 2)}; "
                 f"from single-layer {task.metric} gains {_f(task.expected_layer, 2)}.")
    if task.mix:
        weights = ", ".join(f"{i}: {w:.3f}" for i, w in enumerate(task.mix["weights"]))
        lines.append(f"ScalarMix weights softmax(w) (gamma {_f(task.mix['gamma'], 3)}): {weights}.")
    return lines


def markdown(tasks: list[TaskSummary], *, title: str) -> str:
    lines = [f"# Probing: {title}", ""]
    for task in tasks:
        seeds = ", ".join(map(str, task.seeds))
        lines += [f"## {task.name} ({task.kind}; means over seeds {seeds})", "", *task_table(task), ""]
    lines += ["Score: span F1 (conlleval) for span sets, token accuracy for token sets; control acc: the same "
              "probe on the control task (Hewitt and Liang 2019); selectivity = acc - control acc; nu: layer "
              "variability on the train tokens (lower = better).", ""]
    return "\n".join(lines)


@quiet_glyphs
def plot(tasks: list[TaskSummary], *, path: str, title: str) -> str:
    """Tasks x layers: the scores min-max scaled per task, expected layers marked (o: single-layer
    gains, x: ScalarMix center of gravity); selectivity beside it when there are control probes."""
    layers = sorted({layer for t in tasks for layer in t.layers})
    col = {layer: i for i, layer in enumerate(layers)}
    grid = np.full((len(tasks), len(layers)), np.nan)
    sel = np.full_like(grid, np.nan)
    for r, task in enumerate(tasks):
        s = np.array([np.nan if v is None else v for v in task.score], dtype=float)
        lo, hi = np.nanmin(s) if np.isfinite(s).any() else 0, np.nanmax(s) if np.isfinite(s).any() else 1
        for i, layer in enumerate(task.layers):
            grid[r, col[layer]] = (s[i] - lo) / (hi - lo) if hi > lo else 1.0
            if task.selectivity[i] is not None:
                sel[r, col[layer]] = task.selectivity[i]
    panels = 2 if np.isfinite(sel).any() else 1
    fig, axes = new_figure(1, panels, figsize=(1.0 + 0.42 * len(layers) * panels + 1.2 * panels,
                                                 1.2 + 0.45 * len(tasks)), dpi=100, squeeze=False)
    ax = axes[0, 0]
    image = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02).set_label("score, scaled per task", fontsize=8)
    if len(layers) <= 25:  # the raw score in each cell, two digits
        for r, task in enumerate(tasks):
            for layer, value in zip(task.layers, task.score):
                if value is not None:
                    ax.text(col[layer], r, f"{value:.2f}"[1:] if 0 <= value < 1 else f"{value:.1f}", ha="center",
                            va="center", fontsize=6, color="white" if grid[r, col[layer]] < 0.6 else "black")
    for r, task in enumerate(tasks):
        marks = [(task.expected_layer, "o"), (task.mix.get("center_of_gravity"), "x")]
        for value, marker in marks:
            if value is not None:
                ax.plot(np.interp(value, layers, range(len(layers))), r, marker=marker, color="red", markersize=7,
                        markerfacecolor="none", markeredgewidth=1.6, linestyle="none")
    ax.set_title("score (o: expected layer, x: mix center)", fontsize=9)
    if panels == 2:
        ax2 = axes[0, 1]
        bound = np.nanmax(np.abs(sel)) or 1.0
        image2 = ax2.imshow(sel, aspect="auto", cmap="RdBu", vmin=-bound, vmax=bound)
        fig.colorbar(image2, ax=ax2, fraction=0.05, pad=0.02).set_label("acc - control acc", fontsize=8)
        ax2.set_title("selectivity", fontsize=9)
    for a in axes[0]:
        a.set_xticks(range(len(layers)), [str(x) for x in layers], fontsize=7)
        a.set_yticks(range(len(tasks)), [t.name for t in tasks], fontsize=8)
        a.set_xlabel("layer (0 = embeddings)", fontsize=8)
    fig.suptitle(title, fontsize=9, parse_math=False)  # a $ in a name is text, not TeX
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure_saved(fig, path)
    return path


def write_report(records: list[dict], *, out: str, title: str) -> tuple[str, str, list[TaskSummary]]:
    """``<out>/probe.md`` and ``<out>/probe.png`` of one run's records; returns their paths and the summaries."""
    tasks = summarize(records)
    md = os.path.join(out, "probe.md")
    os.makedirs(out, exist_ok=True)
    text_saved(md, markdown(tasks, title=title))
    return md, plot(tasks, path=os.path.join(out, "probe.png"), title=title), tasks
