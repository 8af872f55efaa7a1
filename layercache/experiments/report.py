"""Tables and plots of a sweep, rendered from its results file alone.

Table: best dev F1 per (fusion, N-shot, epoch cap), mean and 95% confidence interval over trials
(Student t, n-1 degrees of freedom). Plots in the style of the DWAtt paper: F1 against N-shot, one
panel per epoch cap, one line per fusion with its CI band (Figure 3); dev F1 against training step
for chosen N, averaged over trials (Figure 4).
"""

from __future__ import annotations

import math
import os
from collections import defaultdict

import numpy as np

from .plots import plt  # Agg backend, set once there


def ci95(values) -> tuple[float, float]:
    """(mean, half-width of the 95% CI of the mean); the half-width is 0 for a single value."""
    from scipy.stats import t

    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), 0.0
    return float(x.mean()), float(t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


def cells(records) -> dict[tuple, list[dict]]:
    """Records grouped by (fusion, shots, epochs); shots None (all) sorts last."""
    out = defaultdict(list)
    for r in records:
        c = r["config"]
        out[(c["fusion"], c["shots"], c["epochs"])].append(r)
    return dict(out)


def table(records, *, metric: str = "best_dev_f1") -> str:
    """Markdown: one row per (fusion, N), one column per epoch cap, 'mean ± CI (n)' in F1 points."""
    groups = cells(records)
    caps = sorted({k[2] for k in groups})
    rows = sorted({(k[0], k[1]) for k in groups}, key=lambda x: (x[0], x[1] or 10**9))
    lines = ["| fusion | N | " + " | ".join(f"{e} epochs" for e in caps) + " |",
             "|---|---:|" + "---:|" * len(caps)]
    for fusion, shots in rows:
        vals = []
        for e in caps:
            runs = groups.get((fusion, shots, e), [])
            if not runs:
                vals.append("")
                continue
            mean, half = ci95([100 * r[metric] for r in runs])
            vals.append(f"{mean:.1f} ± {half:.1f} ({len(runs)})")
        lines.append(f"| {fusion} | {shots or 'all'} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def plot_f1_vs_shots(records, path: str, *, title: str = "") -> str:
    """Figure 3: one panel per epoch cap; x = N-shot (log2), y = best dev F1; CI bands."""
    groups = cells(records)
    caps = sorted({k[2] for k in groups})
    fusions = sorted({k[0] for k in groups})
    fig, axes = plt.subplots(1, len(caps), figsize=(2.6 * len(caps) + 0.6, 2.8), dpi=100, sharey=True, squeeze=False)
    for ax, cap in zip(axes[0], caps):
        for fusion in fusions:
            shots = sorted(k[1] for k in groups if k[0] == fusion and k[2] == cap and k[1] is not None)
            if not shots:
                continue
            stats = [ci95([100 * r["best_dev_f1"] for r in groups[(fusion, n, cap)]]) for n in shots]
            mean = np.array([s[0] for s in stats])
            half = np.array([s[1] for s in stats])
            (line,) = ax.plot(shots, mean, marker="o", markersize=3, linewidth=1.2, label=fusion)
            ax.fill_between(shots, mean - half, mean + half, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xscale("log", base=2)
        _style(ax, title=f"{cap} epochs", xlabel="N-shot")
    return _save(fig, axes, path, ylabel="best dev F1", title=title)


def plot_f1_vs_step(records, path: str, *, shots: list[int], epochs: int | None = None, title: str = "") -> str:
    """Figure 4: dev F1 against optimizer step at the largest epoch cap run for each N, mean over trials."""
    groups = cells(records)
    fusions = sorted({k[0] for k in groups})
    fig, axes = plt.subplots(1, len(shots), figsize=(3.0 * len(shots) + 0.6, 2.8), dpi=100, squeeze=False)
    for ax, n in zip(axes[0], shots):
        cap = epochs or max((k[2] for k in groups if k[1] == n), default=0)  # the longest runs of this N
        for fusion in fusions:
            runs = groups.get((fusion, n, cap), [])
            if not runs:
                continue
            steps = [e["step"] for e in runs[0]["evals"]]
            curves = np.array([[e["dev_f1"] for e in r["evals"]] for r in runs if len(r["evals"]) == len(steps)])
            ax.plot(steps, 100 * curves.mean(0), marker="o", markersize=2, linewidth=1.2, label=fusion)
        _style(ax, title=f"N = {n}, {cap} epochs", xlabel="step")
    return _save(fig, axes, path, ylabel="dev F1", title=title)


def _style(ax, *, title: str, xlabel: str) -> None:
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)


def _save(fig, axes, path: str, *, ylabel: str, title: str) -> str:
    axes[0][0].set_ylabel(ylabel, fontsize=8)
    labelled = [ax for ax in axes[0] if ax.get_legend_handles_labels()[0]]
    if labelled:
        labelled[-1].legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def render(records, out: str, *, curve_shots: list[int] | None = None) -> dict[str, str]:
    """Write report.md, f1_vs_shots.png and f1_vs_step.png into `out`; returns their paths."""
    records = list(records)
    first = records[0]
    title = f"{first.get('model')} on {first.get('dataset')}"
    shots_seen = sorted({r["config"]["shots"] for r in records if r["config"]["shots"] is not None})
    curve_shots = curve_shots or ([shots_seen[0], shots_seen[-1]] if len(shots_seen) > 1 else shots_seen)
    paths = {"table": os.path.join(out, "report.md"),
             "shots": plot_f1_vs_shots(records, os.path.join(out, "f1_vs_shots.png"), title=title)}
    if curve_shots:
        paths["steps"] = plot_f1_vs_step(records, os.path.join(out, "f1_vs_step.png"), shots=curve_shots, title=title)
    seconds = [r["seconds"]["total"] for r in records]
    text = (f"# Sweep: {title}\n\n{len(records)} runs; best dev F1 (x100), mean ± 95% CI over trials (n)\n\n"
            f"{table(records)}\n\nseconds per run: median {np.median(seconds):.1f}, total {sum(seconds):.0f}\n")
    with open(paths["table"], "w", encoding="utf-8") as f:
        f.write(text)
    return paths
