"""Tables and figures of scripts/depth_study_conll.py, from its records alone (and, for the
relative-depth figure, `nu` per layer computed from each backbone's cache)."""

from __future__ import annotations

import os
from collections import defaultdict

import numpy as np

from depth_study_conll import head_of, protocol_of
from layercache.experiments.report import ci95


def _groups(records: list[dict]) -> dict:
    """(protocol, head, N) -> runs, for the runs that fuse every layer."""
    out = defaultdict(list)
    for r in records:
        c = r["config"]
        if c.get("layers") is None:
            out[protocol_of(c), head_of(c), c["shots"]].append(r)
    return out


def _cell(values: list[float]) -> str:
    mean, half = ci95(values)
    return f"{mean:.1f} ± {half:.1f}"


def gains(runs: list[dict], base: list[dict]) -> list[float]:
    """Dev F1 gain over Base, seed by seed (the same sample per seed), x100."""
    by_seed = {r["config"]["seed"]: r["best_dev_f1"] for r in base}
    return [100 * (r["best_dev_f1"] - by_seed[r["config"]["seed"]]) for r in runs if r["config"]["seed"] in by_seed]


def tables(records: dict, entries: dict, *, top_k: int) -> str:
    lines = ["| backbone | protocol | head | N | dev F1 | test F1 | gain over base (dev) |",
             "|---|---|---|---:|---:|---:|---:|"]
    for model, recs in records.items():
        groups = _groups(recs)
        for (protocol, head, n), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
            base = groups.get((protocol, "base", n), [])
            gain = _cell(gains(runs, base)) if head != "base" and base else "-"
            tests = [100 * r["test_f1_at_best"] for r in runs if r.get("test_f1_at_best") is not None]
            lines.append(f"| {model} (L={entries[model].num_layers}) | {protocol} | {head} | {n} "
                         f"| {_cell([100 * r['best_dev_f1'] for r in runs])} ({len(runs)}) "
                         f"| {_cell(tests) if tests else '-'} | {gain} |")
    lines += ["", f"Layers picked by variability (auto:{top_k}) against the top {top_k}, layercache protocol:", "",
              "| backbone | head | N | layers | dev F1 | test F1 | layers fused (per seed) |",
              "|---|---|---:|---|---:|---:|---|"]
    for model, recs in records.items():
        picked = defaultdict(list)
        for r in recs:
            if r["config"].get("layers"):
                picked[r["config"]["fusion"], r["config"]["shots"], r["config"]["layers"]].append(r)
        for (fusion, n, spec), runs in sorted(picked.items()):
            fused = " / ".join(",".join(map(str, r["layers"])) for r in sorted(runs, key=lambda r: r["config"]["seed"]))
            tests = [100 * r["test_f1_at_best"] for r in runs if r.get("test_f1_at_best") is not None]
            lines.append(f"| {model} | {fusion} | {n} | {spec} | {_cell([100 * r['best_dev_f1'] for r in runs])} "
                         f"| {_cell(tests) if tests else '-'} | {fused} |")
    return "\n".join(lines)


def figures(records: dict, entries: dict, *, folder: str) -> list[str]:
    return [gains_figure(records, os.path.join(folder, "gains_over_base.png")),
            depth_figure(entries, os.path.join(folder, "nu_by_relative_depth.png"))]


def gains_figure(records: dict, path: str) -> str:
    """Paper Figure 7's layout: per backbone (columns) and protocol (rows), each head's dev-F1 gain
    over Base, one bar per N with its 95% CI."""
    from layercache.experiments.plots import plt

    models, protocols = list(records), ["layercache", "paper"]
    fig, axes = plt.subplots(len(protocols), len(models), figsize=(3.6 * len(models), 2.6 * len(protocols)),
                             dpi=100, squeeze=False, sharey="row")
    for i, protocol in enumerate(protocols):
        for j, model in enumerate(models):
            groups, ax = _groups(records[model]), axes[i][j]
            heads = sorted({h for p, h, _ in groups if p == protocol and h != "base"})
            shots = sorted({n for p, _, n in groups if p == protocol})
            for k, n in enumerate(shots):
                stats = [ci95(gains(groups.get((protocol, h, n), []), groups.get((protocol, "base", n), [])) or [0.0])
                         for h in heads]
                x = np.arange(len(heads)) + (k - (len(shots) - 1) / 2) * 0.38
                ax.bar(x, [s[0] for s in stats], width=0.36, yerr=[s[1] for s in stats], capsize=2, label=f"N = {n}")
            ax.set_xticks(range(len(heads)), heads, fontsize=7, rotation=20)
            ax.axhline(0, color="k", linewidth=0.6)
            ax.set_title(f"{model}, {protocol} protocol", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(axis="y", alpha=0.3)
        axes[i][0].set_ylabel("dev F1 gain over Base", fontsize=8)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def depth_figure(entries: dict, path: str) -> str:
    """`nu` per layer (whole train split, as `rank-layers`) against relative depth layer / L."""
    from layercache.experiments.plots import plt
    from layercache.layers.scores import score_layers

    fig, ax = plt.subplots(figsize=(4.8, 3.2), dpi=100)
    for model, entry in entries.items():
        scores = score_layers(entry.split("train"))
        L = entry.num_layers
        ax.plot([layer / L for layer, _ in scores], [nu for _, nu in scores], marker="o", markersize=3,
                label=f"{model} (L = {L})")
    ax.set_yscale("log")
    ax.set_xlabel("relative depth (layer / L; 0 = embeddings)", fontsize=8)
    ax.set_ylabel("variability ν (lower = better)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="both", alpha=0.3, linewidth=0.5)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
