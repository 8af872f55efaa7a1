"""The paper's Figure 4 at its own setting: dev F1 after every epoch of a 50-epoch run, at N = 8 and
N = 128, drawn from the per-epoch records of the paired grid (scripts/paired_grid_conll.py), training
nothing.

    python scripts/figure4_conll.py --records docs/results/paired_grid_conll.jsonl --shots 8,128

One panel per N, one curve per head (mean over seeds) with its 95% CI band (Student t over the seeds),
both panels on the same y-range from 0, epochs on the x-axis with the share of training above it.
Writes the figure to --plot (docs/results/figure4_conll.png) and to --table
(docs/results/figure4_conll.md): the paired per-seed differences at selected epochs (the heads of
one seed train on the same sample), and for each head the epoch at which a run first comes within
--near of its own best dev F1 ("converged"), as a share of training.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from _common import (
    PAPER_SCORE,
    by_cell,
    dev_curve,
    epoch_cells,
    public_path,
    read_records,
    results_path,
    say,
    split_list,
    write_results,
)

from layerfuse.experiments.paired import against_zero, ci_cell

ORDER = ["concat", "dwatt", "extra", PAPER_SCORE]
PAIRS = [("dwatt", "concat"), ("concat", "extra"), ("dwatt", "extra"), (PAPER_SCORE, "concat")]
EPOCHS = (1, 2, 3, 5, 10, 15, 25, 50)


def paired_at(a: dict, b: dict, epoch: int) -> list[float]:
    """a − b dev F1 after ``epoch``, seed by seed, over the seeds both ran on the same sample."""
    pairs = [(dev_curve(a[s]).get(epoch), dev_curve(b[s]).get(epoch)) for s in sorted(set(a) & set(b))
             if a[s].get("sample_fingerprint") == b[s].get("sample_fingerprint")]
    return [x - y for x, y in pairs if x is not None and y is not None]


def converged_epoch(record: dict, near: float) -> int:
    """The first epoch whose dev F1 is within ``near`` points of the run's best."""
    c = dev_curve(record)
    return min(e for e, v in c.items() if v >= max(c.values()) - near)


def epochs_run(cells: dict) -> int:
    return max(len(dev_curve(r)) for runs in cells.values() for r in runs.values())


def lr_of(runs: dict) -> str:
    return ", ".join(sorted({f"{r['config']['lr']:g}" for r in runs.values()}))


def tables(cells: dict, shots: list[int], *, near: float) -> str:
    epochs = epochs_run(cells)
    shown = [e for e in EPOCHS if e <= epochs]
    present = [(head, n, cells[head, n]) for n in shots for head in ORDER if cells.get((head, n))]
    lines = ["Paired per-seed differences in dev F1 after each epoch shown (a − b, mean ± 95% CI (seeds); "
             "'above', 'below': the interval lies above or below 0, 'inside': it contains 0):", "",
             "| N | a − b | " + " | ".join(f"epoch {e}" for e in shown) + " |",
             "|---:|---|" + "---:|" * len(shown)]
    for n in shots:
        for a, b in PAIRS:
            if (a, n) in cells and (b, n) in cells:
                diffs = [paired_at(cells[a, n], cells[b, n], e) for e in shown]
                row = [f"{ci_cell(d, signed=True)} {against_zero(d).replace(' 0', '')}" if d else "-" for d in diffs]
                lines.append(f"| {n} | {a} − {b} | " + " | ".join(row) + " |")
    lines += ["", "Mean dev F1 after each epoch shown, mean ± 95% CI (seeds):", "",
              "| head | lr | N | " + " | ".join(f"epoch {e}" for e in shown) + " |",
              "|---|---:|---:|" + "---:|" * len(shown)]
    lines += [f"| {head} | {lr_of(runs)} | {n} | {epoch_cells(runs.values(), shown)} |" for head, n, runs in present]
    lines += ["", f"Converged: the first epoch at which a run's dev F1 is within {near:g} point of its own best "
              f"(of {epochs} epochs), per seed; the median as a share of training:", "",
              "| head | N | epoch, per seed | median | share of training |", "|---|---:|---|---:|---:|"]
    for head, n, runs in present:
        at = [converged_epoch(runs[s], near) for s in sorted(runs)]
        med = statistics.median(at)
        lines.append(f"| {head} | {n} | {', '.join(map(str, at))} | {med:g} | {100 * med / epochs:.0f}% |")
    return "\n".join(lines)


def figure(cells: dict, shots: list[int], path: str, *, dev_label: str) -> str:
    import numpy as np

    from layerfuse.display import new_figure
    from layerfuse.experiments.plots import BAND_ALPHA, BAND_LABEL, head_style, legend_handles
    from layerfuse.experiments.report import ci95

    heads = [h for h in ORDER if any((h, n) in cells for n in shots)]
    epochs = epochs_run(cells)
    seeds = sorted({s for runs in cells.values() for s in runs})
    fig, axes = new_figure(1, len(shots), figsize=(4.2 * len(shots) + 0.4, 3.6), dpi=110, sharey=True, squeeze=False)
    top = 0.0
    for ax, n in zip(axes[0], shots):
        for head in heads:
            if not (runs := cells.get((head, n))):
                continue
            xs = list(range(1, epochs + 1))
            curves = [dev_curve(r) for r in runs.values()]
            mean, half = np.array([ci95([c[e] for c in curves if e in c]) for e in xs]).T
            style = head_style(head)
            ax.plot(xs, mean, linewidth=1.3, markersize=2.5, markevery=5, label=head, **style)
            ax.fill_between(xs, np.clip(mean - half, 0, 100), np.clip(mean + half, 0, 100), color=style["color"],
                            alpha=BAND_ALPHA, linewidth=0)
            top = max(top, float((mean + half).max()))
        ax.axvline(0.3 * epochs, color="0.4", linestyle=":", linewidth=0.9)
        ax.text(0.3 * epochs + 0.6, 2, "30% of training", fontsize=7, color="0.3")
        ax.set_title(f"N = {n} ({epochs} epochs, {len(seeds)} seeds)", fontsize=9)
        ax.set_xlabel("epoch", fontsize=8)
        ax.set_xlim(0, epochs + 1)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        share = ax.secondary_xaxis("top", functions=(lambda e: 100 * e / epochs, lambda p: p * epochs / 100))
        share.set_xlabel("% of training", fontsize=7)
        share.tick_params(labelsize=6)
    axes[0][0].set_ylim(0, 10 * np.ceil(top / 10))
    axes[0][0].set_ylabel(f"dev F1 ({dev_label})", fontsize=8)
    names = sorted(set(heads))  # legend_handles' order
    lrs = {h: lr_of(cells[h, shots[0]]) for h in names if (h, shots[0]) in cells}
    handles, labels = legend_handles(heads, band=f"{BAND_LABEL} over {len(seeds)} seeds")
    labels = [f"{lab}, lr {lrs[h]}" if h in lrs else lab for h, lab in zip(names, labels)] + labels[len(names):]
    axes[0][-1].legend(handles, labels, fontsize=7, loc="lower right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def dev_label(cells: dict) -> str:
    records = [r for runs in cells.values() for r in runs.values()]
    sizes = {r["config"].get("dev_sentences") for r in records}
    if sizes != {None}:
        (n,) = sizes
        return f"dev subset of {n:,} sentences"
    conll = all(r.get("dataset") == "conll2003" for r in records)
    return "whole dev split, 3,250 sentences" if conll else "whole dev split"


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", default=results_path("paired_grid_conll", ".jsonl"),
                    help="per-run records with an evaluation after every epoch (scripts/paired_grid_conll.py)")
    ap.add_argument("--shots", default="8,128", help="one panel per N")
    ap.add_argument("--near", type=float, default=1.0, help="'converged': within this many dev F1 points of the best")
    ap.add_argument("--plot", default=results_path("figure4_conll", ".png"))
    ap.add_argument("--table", default=results_path("figure4_conll"))
    args = ap.parse_args(argv)
    cells, shots = by_cell(read_records(args.records)), split_list(args.shots, int)
    if missing := [n for n in shots if not any(k[1] == n for k in cells)]:
        raise SystemExit(f"error: {args.records} has no runs at N = {', '.join(map(str, missing))}")
    dev = dev_label(cells)
    figure(cells, shots, args.plot, dev_label=dev)
    say(f"wrote {args.plot}")
    machine = Path(args.records).with_suffix(".md")
    machine = next((line.removeprefix("Machine: ").rstrip(".") for line in machine.read_text().splitlines()
                    if line.startswith("Machine: ")), None) if machine.is_file() else None
    text = (f"Drawn from `{public_path(str(Path(args.records).resolve()))}` "
            f"(the runs of scripts/paired_grid_conll.py; this script trains nothing). F1 x100, dev: "
            f"{dev}, evaluated after every epoch. Figure: {Path(args.plot).name} (beside this file).\n\n"
            + tables(cells, shots, near=args.near))
    print(text)
    write_results(args.table, text, title="Figure 4 at the paper's setting: dev F1 after every epoch (CoNLL-2003, "
                  "all-MiniLM-L6-v2)", script="figure4_conll", argv=argv, machine=f"the runs' machine: {machine}"
                  if machine else None)
    return text


if __name__ == "__main__":
    main()
