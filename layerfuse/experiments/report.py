"""Tables and plots of a sweep, rendered from its results file alone.

Table: best dev F1 per (fusion, N-shot, epoch cap), mean and 95% confidence interval over trials
(Student t, n-1 degrees of freedom). Plots in the style of the DWAtt paper: F1 against N-shot, one
panel per epoch cap, one line per fusion with its CI band (Figure 3); dev F1 against training step
for chosen N, averaged over trials (Figure 4). MLM sweeps report perplexity instead (lower is
better), and sweeps on a label set of word classes (POS) token accuracy: `Metric` says which numbers a
record reports. The figures' files keep their names (f1_vs_shots.png, f1_vs_step.png) whatever the metric.
"""

from __future__ import annotations

import math
import os
import re
import textwrap
from collections import defaultdict
from dataclasses import fields
from functools import cached_property
from typing import NamedTuple

import numpy as np
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

from ..display import first_few, new_figure, quiet_glyphs
from ..errors import LayerfuseError, OptionError
from ..files import figure_saved, text_saved
from ..fusions.config import FusionConfig
from ..tasks import task_of
from ..training.config import TrainConfig
from .paired import ci95, paired_table
from .plots import BAND_ALPHA, BAND_LABEL, head_style, legend_handles
from .results import RESULTS, diverged, refuse_mixed_metrics


class Metric(NamedTuple):
    name: str  # in table headers and axis labels
    dev: str  # the record's best dev value
    test: str  # the record's test value at the best dev point
    step: str  # the key of each evaluation's dev value (curves)
    scale: float  # shown as value * scale (F1 in points)
    higher_is_better: bool
    limits: tuple[float, float] = (0.0, 100.0)  # the range a shown value can take: bands are clipped to it


F1 = Metric("F1", "best_dev_f1", "test_f1_at_best", "dev_f1", 100.0, True)
PERPLEXITY = Metric("perplexity", "best_dev_ppl", "test_ppl_at_best", "dev_ppl", 1.0, False, (1.0, math.inf))
ACCURACY = Metric("accuracy", "best_dev_accuracy", "test_accuracy_at_best", "dev_accuracy", 100.0, True)
METRICS = {"f1": F1, "ppl": PERPLEXITY}  # by `layerfuse.tasks.Task.headline`


def metric_of(records) -> Metric:
    """The headline metric of the records' task: perplexity for MLM, F1 for NER (records from before
    tasks existed are NER), token accuracy for a token-level label set (POS)."""
    records = list(records)
    if records and records[0].get("best_dev_accuracy") is not None:
        return ACCURACY
    return METRICS[task_of(records[0]["config"] if records else None).headline]


# Fewer trials than this: the t interval is too wide to mean much (n = 2: 12.7 standard errors each side),
# and with one trial there is none. Figure 3 draws no band for such a cell, and the report says so.
MIN_TRIALS = 3


# A cell's own coordinates, the rate the report picks per cell, where a run ran, and what `label` names
# anyway: any other setting of the runs' configs that differs among the records of one report (two sweeps
# into one --out, say, with other --layers) names their rows apart, so that no row averages two experiments.
NOT_APART = {"fusion", "shots", "epochs", "seed", "lr", "device", "options", "query_layer"}
RUN_DEFAULTS = {f.name: f.default for f in fields(TrainConfig)}  # what a record without a setting ran
NONE_SHOWN = {"layers": "all", "dev_sentences": "all"}  # how a row shows a setting left at None


class Grouped(list):
    """A report's records with their grouping, each part worked out once, when first asked: the settings
    apart, the cells (`by_cell`) and each cell's chosen rate (`best_lr`). `render` hands one to every table
    and figure it draws: given a plain list, each grouped the records again (a dozen times a report)."""

    @cached_property
    def apart(self) -> list[str]:
        return [name for name, default in RUN_DEFAULTS.items()
                if name not in NOT_APART and len({repr(r["config"].get(name, default)) for r in self}) > 1]

    @cached_property
    def by_cell(self) -> dict[tuple, list[dict]]:
        out = defaultdict(list)
        for r in self:
            c = r["config"]
            out[(label(c, self.apart), c["shots"], c["epochs"])].append(r)
        return dict(out)

    @cached_property
    def chosen(self) -> dict[tuple, tuple[float, list[dict]]]:
        return {key: best_lr(runs) for key, runs in self.by_cell.items()}


def grouped(records) -> Grouped:
    """``records`` as a `Grouped`: itself when it is one, so that what it worked out is reused."""
    return records if isinstance(records, Grouped) else Grouped(records)


def settings_apart(records) -> list[str]:
    """The run settings (`TrainConfig` fields outside `NOT_APART`) that take more than one value among
    ``records``."""
    return grouped(records).apart


def label(config: dict, apart: list[str] = ()) -> str:
    """A row's name: the fusion, and what sets it apart from the same fusion's other runs: each of its
    own settings (`Fusion.options`) away from its default (a record written before a setting existed
    ran `Option.before`), ``z_L top`` for a head that read the backbone's top layer as its z_L
    (`--query-layer top`), and its value of each setting in ``apart`` (`settings_apart`)."""
    from ..fusions.registry import FUSIONS

    fusion, parts = config["fusion"], []
    for option in getattr(FUSIONS.get(fusion), "options", ()):
        value = config.get(option.name, option.legacy)
        if option.names_row and value != option.default:  # a word names itself ("paper"); a number says what it is
            parts.append(value if isinstance(value, str) else f"{option.name.replace('_', ' ')} {value}")
    query = config.get("query_layer", FusionConfig.query_layer)
    if query != FusionConfig.query_layer and fusion in FUSIONS and FUSIONS[fusion].reads_query_layer:
        parts.append(f"z_L {query}")
    for name in apart:
        value = config.get(name, RUN_DEFAULTS[name])
        shown = NONE_SHOWN.get(name, "default") if value is None else value
        parts.append(f"{name.replace('_', ' ')} {shown}")
    return f"{fusion} ({', '.join(parts)})" if parts else fusion


def base_rows(records, against: str = "base") -> dict[str, str]:
    """Each row's name -> the name of the ``against`` row of its settings apart (`settings_apart`): the
    runs it is paired with."""
    apart = settings_apart(records)
    return {label(r["config"], apart): label({"fusion": against, **{k: r["config"][k] for k in apart
                                                                   if k in r["config"]}}, apart) for r in records}


def lr_of(record: dict) -> float:
    return record["config"].get("lr", 5e-5)  # records of the first release all hold it; tests' may not


def by_cell(records) -> dict[tuple, list[dict]]:
    """All records grouped by (label, shots, epochs); runs that differ in another setting
    (`settings_apart`) are other rows."""
    return grouped(records).by_cell


def best_lr(runs: list[dict]) -> tuple[float, list[dict]]:
    """(learning rate, its runs) with the best mean best dev score among ``runs`` (the highest F1,
    the lowest perplexity; chosen on dev only; ties: the lower rate). A rate with a run that diverged
    (`results.diverged`: a broken head's score, nan or any number) is chosen only when every rate has one."""
    by_lr = defaultdict(list)
    for r in runs:
        by_lr[lr_of(r)].append(r)
    m = metric_of(runs)
    sign = 1 if m.higher_is_better else -1
    trained = [x for x in sorted(by_lr) if not any(diverged(r) for r in by_lr[x])] or sorted(by_lr)
    lr = max(trained, key=lambda x: sign * np.mean([r[m.dev] for r in by_lr[x]]))
    return lr, by_lr[lr]


def cells(records) -> dict[tuple, list[dict]]:
    """Records by (label, shots, epochs), at each cell's best learning rate on dev."""
    return {key: runs for key, (_, runs) in grouped(records).chosen.items()}


def _f1(runs: list[dict], metric: str, scale: float = 100.0) -> str:
    values = [scale * r[metric] for r in runs if r.get(metric) is not None]
    if not values:
        return "-"
    if not all(math.isfinite(v) for v in values):  # an MLM run whose perplexity overflowed: no interval to give
        return f"inf ({len(values)})"
    mean, half = ci95(values)
    return f"{mean:.1f} ± {half:.1f} ({len(values)})"


def table(records) -> str:
    """Markdown, one row per (fusion, N, epoch cap): the learning rate chosen on dev (mean best dev
    score over trials), and at it the best dev score and the test score at the best dev point, each
    'mean ± 95% CI (n)' in points of F1 or accuracy (MLM: perplexities); headed by the records' metric."""
    records = grouped(records)
    groups, m = records.by_cell, metric_of(records)
    lines = [f"| fusion | N | epochs | lr (best on dev) | dev {m.name} | test {m.name} |",
             "|---|---:|---:|---:|---:|---:|"]
    for key in sorted(groups, key=lambda k: (k[0], k[1] or 10**9, k[2])):
        lr, runs = records.chosen[key]
        n_lrs = len({lr_of(r) for r in groups[key]})
        lines.append(f"| {key[0]} | {key[1] or 'all'} | {key[2]} | {lr:g}{f' of {n_lrs}' if n_lrs > 1 else ''} "
                     f"| {_f1(runs, m.dev, m.scale)} | {_f1(runs, m.test, m.scale)} |")
    return "\n".join(lines)


def dev_note(records) -> str:
    """What the dev scores were measured on: the whole dev split, or the fixed random subset of
    ``--dev-sentences`` (the same in every run), per value when the runs differ."""
    records = list(records)
    unit = "blocks" if metric_of(records) is PERPLEXITY else "sentences"
    counts = defaultdict(int)
    for r in records:
        counts[r["config"].get("dev_sentences")] += 1

    def what(n) -> str:
        if not n:
            return "the whole dev split"
        return f"a fixed random subset of {n:,} dev {unit}, the same in every run (`--dev-sentences {n}`)"

    if len(counts) == 1:
        return f"Dev: {what(next(iter(counts)))}."
    by_size = sorted(counts.items(), key=lambda kv: kv[0] or 0)
    return "Dev: " + "; ".join(f"{k} runs on {what(n)}" for n, k in by_size) + "."


def shots_stats(records) -> dict[tuple, tuple[float, float]]:
    """(label, N, epoch cap) -> (mean, 95% CI half-width) of the best dev score (x scale), each cell
    at its best learning rate: what Figure 3 plots (N None: the whole train split, `--shots all`)."""
    m = metric_of(records)
    return {key: ci95([m.scale * r[m.dev] for r in runs]) for key, runs in cells(records).items()}


def shots_trials(records) -> dict[tuple, int]:
    """(label, N, epoch cap) -> the number of trials behind each `shots_stats` cell."""
    return {key: len(runs) for key, runs in cells(records).items()}


def few_trials_note(records, *, figure: bool = True) -> str | None:
    """What the report says when a cell has fewer than `MIN_TRIALS` trials: its ± is only indicative
    (and, when ``figure``, that f1_vs_shots.png draws no band for it). The figure's file keeps its name
    whatever the metric; the note says which one it draws when that is not F1."""
    n = min((len(runs) for runs in cells(records).values()), default=MIN_TRIALS)
    if n >= MIN_TRIALS:
        return None
    m = metric_of(records)
    drawn = "" if m is F1 else f" (best dev {m.name} against N)"
    return (f"Some cells have fewer than {MIN_TRIALS} trials (as few as {n}): their ± is only indicative "
            f"(with 2 trials the 95% interval is 12.7 standard errors each side; with 1 there is none and "
            f"± 0.0 is shown)" + (f", and f1_vs_shots.png{drawn} draws no band for them." if figure else "."))


def diverged_note(records) -> str | None:
    """The runs whose training or dev loss went nan or inf (`diverged_at`): their scores are those of a broken
    head, so the report names them rather than averaging them in silence (`train-head` refuses such a run)."""
    lost = [r for r in records if diverged(r)]
    if not lost:
        return None
    named = first_few([r.get("run_id", "?") for r in lost], sep=", ")
    return (f"{len(lost)} run{'s' * (len(lost) != 1)} diverged (training or dev loss nan or inf): {named}. Their "
            "scores are those of a broken head: a cell's learning rate is one of theirs only when every rate has one, "
            "and no head of theirs is kept; rerun them at a lower learning rate.")


TABLE_ROW = re.compile(r"^\|\s*(?P<label>[^|]+?)\s*\|\s*(?P<shots>\d+|all)\s*\|\s*(?P<epochs>\d+)\s*\|[^|]*\|"
                       r"\s*(?P<mean>-?[\d,]+\.\d+)\s*±\s*(?P<half>[\d,]+\.\d+)(?:\s*\((?P<n>\d+)\))?", re.M)


def stats_from_table(markdown: str) -> dict[tuple, tuple[float, float]]:
    """`shots_stats` read back from the first table of a report.md that `render` wrote (the rows
    'fusion | N | epochs | lr | dev mean ± half (n) | ...'): Figure 3 redrawn from a committed report
    when its per-run results file is not at hand (values rounded as the table shows them)."""
    # the per-lr tables and the attention table that may follow are not what Figure 3 plots
    out = {}
    for row in TABLE_ROW.finditer(_first_table(markdown)):
        out[_row_key(row)] = (float(row["mean"].replace(",", "")), float(row["half"].replace(",", "")))
    return out


def trials_from_table(markdown: str) -> dict[tuple, int]:
    """`shots_trials` read back from the same table (its "(n)"): the redrawn figure leaves out the bands
    of cells of few trials, as the figure drawn from the records does."""
    return {_row_key(row): int(row["n"]) for row in TABLE_ROW.finditer(_first_table(markdown)) if row["n"]}


def _first_table(markdown: str) -> str:
    """The report's main table: before the per-lr sections and the attention table."""
    return markdown.split("\n## ", 1)[0].split("\nAttention over layers", 1)[0]


def _row_key(row) -> tuple:
    return row["label"], None if row["shots"] == "all" else int(row["shots"]), int(row["epochs"])


def plot_f1_vs_shots(records, path: str, *, title: str = "") -> str | None:
    """Figure 3: one panel per epoch cap; x = N-shot (log2), y = best dev score (F1, accuracy, perplexity);
    CI bands (clipped to the metric's range, none for a cell of fewer than `MIN_TRIALS` trials); runs on the
    whole train split at "all", right of the largest N. None when no run has an N (a grid of `--shots all`
    alone): there is no x axis to draw."""
    m = metric_of(records)
    return draw_f1_vs_shots(shots_stats(records), path, ylabel=f"best dev {m.name}{dev_axis(records)}",
                            title=title, trials=shots_trials(records), limits=m.limits)


def dev_axis(records) -> str:
    """What an axis of dev scores measured, when it is not the whole split: ' (dev subset of 1,000
    sentences)' for runs made with ``--dev-sentences 1000`` (all the same), else ''."""
    sizes = {r["config"].get("dev_sentences") for r in records}
    if len(sizes) != 1 or not next(iter(sizes)):
        return ""
    unit = "blocks" if metric_of(records) is PERPLEXITY else "sentences"
    return f" (dev subset of {next(iter(sizes)):,} {unit})"


def draw_f1_vs_shots(stats: dict[tuple, tuple[float, float]], path: str, *, ylabel: str = "best dev F1",
                     title: str = "", trials: dict[tuple, int] | None = None,
                     limits: tuple[float, float] = F1.limits) -> str | None:
    """Figure 3 from ``{(label, N, cap): (mean, half-width)}``: one panel per cap, each head in its
    own `head_style` whichever panels it is in. N None (the whole train split) is a point of its own
    at "all", one doubling right of the largest N and not joined to the line (its distance means
    nothing). Bands are clipped to ``limits`` (a mean ± a wide half-width can leave the metric's
    range); ``trials`` (cell -> n, when known): no band for a cell of fewer than `MIN_TRIALS`, and the
    figure says so. None, and nothing written, when no cell has an N."""
    numbers = sorted({k[1] for k in stats if k[1] is not None})
    if not numbers:
        return None
    at = {**{n: n for n in numbers}, None: 2 * numbers[-1]}  # where each N is drawn
    few = sorted({n for key, n in (trials or {}).items() if key in stats and n < MIN_TRIALS})
    caps = sorted({k[2] for k in stats})
    heads = sorted({k[0] for k in stats})
    fig, axes = new_figure(1, len(caps), figsize=(2.6 * len(caps) + 0.6, 2.8), dpi=100, sharey=True, squeeze=False)
    for ax, cap in zip(axes[0], caps):
        for head in heads:
            style = head_style(head)
            shots = sorted(k[1] for k in stats if k[0] == head and k[2] == cap and k[1] is not None)
            apart = [None] if (head, None, cap) in stats else []
            for group, joined in ((shots, True), (apart, False)):
                if group:
                    _shots_points(ax, [at[n] for n in group], [stats[head, n, cap] for n in group], label=head,
                                  banded=[(trials or {}).get((head, n, cap), MIN_TRIALS) >= MIN_TRIALS for n in group],
                                  joined=joined, limits=limits, style=style)
        ax.set_xscale("log", base=2)
        drawn = sorted({at[k[1]] for k in stats if k[2] == cap})
        ax.set_xticks(drawn, ["all" if x == at[None] else str(x) for x in drawn])
        ax.xaxis.set_minor_locator(NullLocator())
        _style(ax, title=f"{cap} epoch{'s' * (cap != 1)}", xlabel="N-shot")
    note = (f"no interval drawn where a cell has fewer than {MIN_TRIALS} trials "
            f"(n = {', '.join(map(str, few))})") if few else ""
    return _save(fig, axes, path, ylabel=ylabel, title=title, heads=heads, note=note,
                 band=f"{BAND_LABEL} over trials" if any(ax.collections for ax in axes[0]) else None)


def _shots_points(ax, xs: list, cells: list[tuple[float, float]], *, label: str, banded: list[bool], joined: bool,
                  limits: tuple[float, float], style: dict) -> None:
    """One head's points of one panel of Figure 3 (``cells``: mean, half-width) at ``xs``, a line through
    them when ``joined``; a band where ``banded``, or a bar at a banded point without banded neighbours (a
    band has no width there: one N, say, or the "all" point)."""
    mean, half, banded = (np.array([c[0] for c in cells]), np.array([c[1] for c in cells]), np.array(banded))
    ax.plot(xs, mean, markersize=3, linewidth=1.2, label=label, **(style if joined else {**style, "linestyle": "none"}))
    if not banded.any():
        return
    low, high = np.clip(mean - half, *limits), np.clip(mean + half, *limits)
    if joined:
        ax.fill_between(xs, low, high, where=banded, color=style["color"], alpha=BAND_ALPHA, linewidth=0)
    alone = banded & ~np.r_[False, banded[:-1]] & ~np.r_[banded[1:], False] if joined else banded
    if alone.any():
        ax.errorbar(np.asarray(xs)[alone], mean[alone], yerr=[(mean - low)[alone], (high - mean)[alone]],
                    fmt="none", ecolor=style["color"], alpha=0.6, capsize=3, linewidth=1)


def plot_f1_vs_step(records, path: str, *, shots: list[int | None], epochs: int | None = None,
                    title: str = "") -> str:
    """Figure 4: the dev score against optimizer step at the largest epoch cap run for each N (None: the
    whole train split, `--shots all`), mean over trials."""
    groups = cells(records)
    m = metric_of(records)
    heads = sorted({k[0] for k in groups})
    fig, axes = new_figure(1, len(shots), figsize=(3.0 * len(shots) + 0.6, 2.8), dpi=100, squeeze=False)
    for ax, n in zip(axes[0], shots):
        cap = epochs or max((k[2] for k in groups if k[1] == n), default=0)  # the longest runs of this N
        drawn = set()
        for head in heads:
            runs = groups.get((head, n, cap), [])
            if not runs:
                continue
            runs = [r for r in runs if r.get("evals")]  # a record without its curve (edited) draws none
            if not runs:
                continue
            steps = [e["step"] for e in runs[0]["evals"]]
            drawn.update(steps)
            curves = np.array([[_number(e[m.step]) for e in r["evals"]] for r in runs if len(r["evals"]) == len(steps)])
            ax.plot(steps, m.scale * curves.mean(0), markersize=2, linewidth=1.2, label=head, **head_style(head))
        _style(ax, title=f"N = {n or 'all'}, {cap} epoch{'s' * (cap != 1)}", xlabel="step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no tick at 1.25
        if len(drawn) == 1:  # the locator falls back to fractions around a single whole number
            ax.set_xticks(sorted(drawn))
    return _save(fig, axes, path, ylabel=f"dev {m.name}{dev_axis(records)}", title=title, heads=heads)


def _number(value) -> float:
    """A recorded number; nan for null, which a record writes for nan or inf (valid JSON has neither)."""
    return np.nan if value is None else value


def attention_table(records) -> str | None:
    """Markdown: for the heads that attend over layers (DWAtt), the mean of each token's largest
    layer weight and of the entropy of its weights (nats; log L = uniform), per cell at its chosen lr."""
    lines = []
    for key, runs in sorted(cells(records).items(), key=lambda kv: (kv[0][0], kv[0][1] or 10**9, kv[0][2])):
        usage = [r["layer_usage"] for r in runs if r.get("layer_usage") and "entropy" in r["layer_usage"]]
        if usage:
            top, ent = ci95([_number(u["top_weight"]) for u in usage]), ci95([_number(u["entropy"]) for u in usage])
            lines.append(f"| {key[0]} | {key[1] or 'all'} | {key[2]} | {top[0]:.2f} ± {top[1]:.2f} "
                         f"| {ent[0]:.2f} ± {ent[1]:.2f} | {len(usage)} |")
    if not lines:
        return None
    return "\n".join(["| fusion | N | epochs | a token's largest weight | entropy (nats) | runs |",
                      "|---|---:|---:|---:|---:|---:|", *lines])


def usage_by_label(records) -> dict[str, tuple[list[int], np.ndarray]]:
    """Mean share of each layer per row label (over every run at its cell's chosen lr that reports
    one), by layer: runs that fused other layers (`--layers auto:K` picks per run) count 0 for a layer
    they did not fuse."""
    out = defaultdict(list)
    for (name, _, _), runs in cells(records).items():
        out[name] += [dict(zip(r["layer_usage"]["layers"], map(_number, r["layer_usage"]["share"])))
                      for r in runs if r.get("layer_usage")]
    means = {}
    for name, shares in sorted(out.items()):
        if shares:
            layers = sorted({layer for share in shares for layer in share})
            means[name] = (layers, np.array([np.mean([share.get(x, 0.0) for share in shares]) for x in layers]))
    return means


def plot_layers_used(records, path: str, *, nu: list | None = None, title: str = "") -> str | None:
    """Heat map of which layers each fusion uses (share of its attention, mixing weight, or Concat's
    contribution ||W_n z_n||: block norms in records made before that), and below it the
    variability nu of the same layers (`rank-layers`; lower = better)."""
    usage = usage_by_label(records)
    if not usage:
        return None
    layers = sorted({x for ids, _ in usage.values() for x in ids})
    grid = np.full((len(usage), len(layers)), np.nan)
    for row, (ids, share) in enumerate(usage.values()):
        grid[row, [layers.index(x) for x in ids]] = share
    rows = 2 if nu else 1
    fig, axes = new_figure(rows, 1, figsize=(1.0 + 0.5 * len(layers), 1.2 + 0.35 * len(usage) + 1.6 * (rows - 1)),
                             dpi=100, squeeze=False, sharex=True,
                             gridspec_kw={"height_ratios": [len(usage) + 1, 2][:rows]})
    ax = axes[0][0]
    ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, extent=(-0.5, len(layers) - 0.5, len(usage) - 0.5, -0.5))
    for (i, j), v in np.ndenumerate(grid):
        if np.isfinite(v):
            dark = v < grid[np.isfinite(grid)].max() / 2
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6, color="w" if dark else "k")
    ax.set_yticks(range(len(usage)), list(usage), fontsize=7)
    ax.set_title(title + ("\n" if title else "") + "share of each layer in the trained head", fontsize=8,
                 parse_math=False)  # a name with a $ is text, not TeX (a lone one was a traceback)
    if nu:
        scored = {int(layer): v for layer, v in nu if v is not None and np.isfinite(v)}
        xs = [i for i, x in enumerate(layers) if x in scored]
        axes[1][0].plot(xs, [scored[layers[i]] for i in xs], marker="o", markersize=3)
        axes[1][0].set_yscale("log")
        axes[1][0].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axes[1][0].yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axes[1][0].tick_params(labelsize=6, which="both")
        # on all of train, where auto:K scores a run's own few-shot sample: the two can rank layers apart
        axes[1][0].set_ylabel("ν on all of train\n(lower = better)", fontsize=7)
        axes[1][0].grid(alpha=0.3)
    axes[-1][0].set_xticks(range(len(layers)), [str(x) for x in layers], fontsize=7)
    axes[-1][0].set_xlabel("layer", fontsize=8)
    fig.tight_layout()
    figure_saved(fig, path)
    return path


def _style(ax, *, title: str, xlabel: str) -> None:
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)


CHARS_PER_INCH = 13  # of 9-point text above the panels


def _save(fig, axes, path: str, *, ylabel: str, title: str, heads: list[str], band: str | None = None,
          note: str = "") -> str:
    """Label, legend (every head of the figure once, drawn from `head_style`), title and ``note`` above
    the panels, save."""
    axes[0][0].set_ylabel(ylabel, fontsize=8)
    drawn = {name for ax in axes[0] for name in ax.get_legend_handles_labels()[1]}
    handles, names = legend_handles([h for h in heads if h in drawn], band=band)
    if handles:  # beside the last panel, not on it: inside, it covered the points of a single N
        axes[0][-1].legend(handles, names, fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    if title or note:
        width = int(fig.get_figwidth() * CHARS_PER_INCH)  # a one-panel figure is narrow: wrap, never clip
        fig.suptitle("\n".join(textwrap.fill(t, width) for t in (title, note) if t), fontsize=9,
                     parse_math=False)  # a model or dataset name with a $ is text, not TeX
    fig.tight_layout()
    figure_saved(fig, path, bbox_inches="tight")  # the legend beside the panels and a long title, whole
    return path


def check_curve_shots(curve_shots, ran: set, *, whose: str = "the runs'") -> None:
    """Every N of ``curve_shots`` (None: the whole train split) is one of ``ran``, else one line naming them."""
    missing = [n for n in curve_shots if n not in ran]
    if missing:
        shown = ", ".join(str(n or "all") for n in sorted(ran, key=lambda n: n or math.inf))
        raise OptionError(f"--curve-shots {','.join(str(n or 'all') for n in missing)}: no run has that N "
                          f"({whose} N: {shown})")


def check_comparable(records: list[dict], where: str) -> None:
    """The runs of one table: one metric, one cache entry (a file put together by hand, or a folder of
    train-head records of two datasets, would average two datasets' runs in one row)."""
    refuse_mixed_metrics(records, where)
    entries = {r["cache_key"]: r for r in records if r.get("cache_key")}
    if len(entries) > 1:
        shown = "; ".join(f"{r.get('model')} on {r.get('dataset')}" for r in entries.values())
        raise LayerfuseError(f"{where} holds runs on {len(entries)} cache entries ({shown}): "
                             "a report compares the runs of one; give each entry's runs their own --out")


@quiet_glyphs
def render(records, out: str, *, curve_shots: list[int] | None = None, per_lr: bool = False,
           nu: list | None = None) -> dict[str, str]:
    """Write report.md, f1_vs_shots.png (when some run has an N) and f1_vs_step.png into `out`; returns
    their paths. ``curve_shots``: the N of the step curves (None = the whole train split); by default
    the smallest and the largest N, or the whole split when no run has an N."""
    records = Grouped(records)  # grouped once for every table and figure below
    check_comparable(records, os.path.join(out, RESULTS))
    first = records[0]
    labels = first.get("label_set") or first["config"].get("labels")  # a chunk or POS sweep: named in the title
    title = f"{first.get('model')} on {first.get('dataset')}" + (f", {labels} labels" if labels not in (None, "ner")
                                                                  else "")
    shots_seen = sorted({r["config"]["shots"] for r in records if r["config"]["shots"] is not None})
    if not curve_shots:
        curve_shots = [shots_seen[0], shots_seen[-1]] if len(shots_seen) > 1 else shots_seen or [None]
    check_curve_shots(curve_shots, {r["config"]["shots"] for r in records})  # it drew an empty "N = 16" panel
    paths = {"table": os.path.join(out, "report.md")}
    shots_figure = plot_f1_vs_shots(records, os.path.join(out, "f1_vs_shots.png"), title=title)
    if shots_figure:
        paths["shots"] = shots_figure
    used = plot_layers_used(records, os.path.join(out, "layers_used.png"), nu=nu, title=title)
    if used:
        paths["layers"] = used
    if curve_shots:
        paths["steps"] = plot_f1_vs_step(records, os.path.join(out, "f1_vs_step.png"), shots=curve_shots, title=title)
    seconds = [t for t in ((r.get("seconds") or {}).get("total") for r in records) if isinstance(t, (int, float))]
    m = metric_of(records)
    what = {F1: "F1 (x100)", ACCURACY: "token accuracy (x100)"}.get(m, "masked-token perplexity (lower is better)")
    text = (f"# Sweep: {title}\n\n{len(records)} runs; {what}, mean ± 95% CI over trials (n); test {m.name} of "
            f"each run's head at its best dev point\n\n{dev_note(records)}\n\n{table(records)}\n")
    for note in (few_trials_note(records, figure="shots" in paths), diverged_note(records)):
        if note:
            text += f"\n{note}\n"
    if per_lr:
        by_lr = defaultdict(list)
        for r in records:
            by_lr[lr_of(r)].append(r)
        for lr in sorted(by_lr):  # each rate's runs are a report of their own: grouped apart
            text += f"\n## lr {lr:g}\n\n{table(by_lr[lr])}\n"
    paired = paired_table(cells(records), m, base_of=base_rows(records))
    if paired:
        text += (f"\n## Each head against base, paired by seed\n\nThe runs of one seed share its few-shot sample, "
                 f"so head − base per seed cancels the sample's luck; mean ± 95% CI over the seeds both ran "
                 f"(pairs), each cell at its best learning rate"
                 f"{'; lower perplexity is better' if not m.higher_is_better else ''}.\n\n{paired}\n")
    attention = attention_table(records)
    if attention:
        text += f"\nAttention over layers on dev, at the best dev point (mean ± 95% CI):\n\n{attention}\n"
    if seconds:  # records edited to drop their times have none to add
        text += f"\nseconds per run: median {np.median(seconds):.1f}, total {sum(seconds):.0f}\n"
    text_saved(paths["table"], text)
    return paths
