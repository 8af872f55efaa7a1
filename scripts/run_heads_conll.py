"""Few-shot FE heads on CoNLL-2003 with all-MiniLM-L6-v2, for the README table.

Runs every fusion at each N for each seed (25 epochs by default) through
`layerfuse.experiments.run_grid` (the cache read once, one JSON line per run appended to --out,
runs already there skipped, so an interrupted run resumes), then prints a markdown table of best
dev F1 and the test F1 at it (mean ± std over seeds) and seconds per run, and writes it to --table
(docs/results/run_heads_conll.md).

    python scripts/run_heads_conll.py                      # the full grid: 5 fusions x N=8,128 x 3 seeds
    python scripts/run_heads_conll.py --seeds 1 --shots 8  # a quick check

The cache is the one `extract --model all-MiniLM-L6-v2 --dataset <data>` makes (train, dev and test)
(extracted here first when missing); its root is --cache-dir, else $LAYERFUSE_HOME.

Cost on a 2-core AMD EPYC (AVX2, fp32), --threads 1, per run: N=128 base 2.4 s, concat 18 s,
dwatt 35 s, extra 52 s, scalarmix 4 s; N=8 2, 7, 13, 16, 2 s (the 5 evaluations on all 3,250 dev
sentences dominate at N=8). The full grid (3 seeds) is about 8 minutes.
"""

from __future__ import annotations

import statistics

from _common import f1_cell, grid_main, runs_of, split_list


def table(records: list[dict], fusions: list[str], shots: list[int]) -> str:
    """Markdown: best dev F1 and the test F1 at it (x100, mean ± std over seeds) and mean seconds per
    run, per fusion and N."""
    head = "| fusion | params | " + " | ".join(f"N={n} dev F1 | N={n} test F1" for n in shots) + " | " \
        + " | ".join(f"N={n} s/run" for n in shots) + " |"
    lines = [head, "|" + "---|" * (2 + 3 * len(shots))]
    for fusion in fusions:
        cells = [runs_of(records, fusion=fusion, shots=n) for n in shots]
        params = next((f"{runs[0]['params']:,}" for runs in reversed(cells) if runs), "-")
        secs = [f"{statistics.mean(r['seconds']['total'] for r in runs):.1f}" if runs else "-" for runs in cells]
        f1s = [f"{f1_cell(runs)} | {f1_cell(runs, 'test_f1_at_best')}" for runs in cells]
        lines.append(f"| {fusion} | {params} | " + " | ".join(f1s) + " | " + " | ".join(secs) + " |")
    return "\n".join(lines)


def text(run) -> str:
    args = run.args
    return (f"CoNLL-2003 dev, {run.model} FE, {args.epochs} epochs, lr {args.lr:g}, "
            f"batch {args.batch_size}, seeds 0..{args.seeds - 1}: best dev F1 x100 (mean ± std (runs)), "
            f"seconds per run\n\n" + table(run.records, split_list(args.fusions), sorted(split_list(args.shots, int))))


GRID = dict(name="run_heads_conll", out="heads_conll.jsonl", fusions="base,concat,dwatt,extra,scalarmix", epochs=25,
            text=text, title=lambda run: f"FE heads on CoNLL-2003 ({run.model})")
main = grid_main(GRID, __doc__)

if __name__ == "__main__":
    main()
