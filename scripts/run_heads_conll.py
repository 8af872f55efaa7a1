"""Few-shot FE heads on CoNLL-2003 with all-MiniLM-L6-v2, for the README table.

Runs every fusion at each N for each seed (25 epochs by default) through
`layerfuse.experiments.run_grid` (one JSON line per run appended to --out, runs already there
skipped, so an interrupted run resumes), then prints a markdown table of best dev F1 and the test
F1 at it (mean ± std over seeds) and seconds per run, and writes it to --table
(docs/results/run_heads_conll.md).

    python scripts/run_heads_conll.py                      # the full grid: 5 fusions x N=8,128 x 3 seeds
    python scripts/run_heads_conll.py --seeds 1 --shots 8  # a quick check

Cost on a 2-core AMD EPYC (AVX2, fp32), --threads 1, per run: N=128 base 2.4 s, concat 18 s,
dwatt 35 s, extra 52 s, scalarmix 4 s; N=8 2, 7, 13, 16, 2 s (the 5 evaluations on all 3,250 dev
sentences dominate at N=8). The full grid (3 seeds) is about 8 minutes.
"""

from __future__ import annotations

import statistics

from _common import Study, args_entry, conll_grid, f1_cell, run_conll_grid, runs_of, split_list, torch_threads

STUDY = Study("run_heads_conll", out="heads_conll.jsonl", fusions="base,concat,dwatt,extra,scalarmix", epochs=25)


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


def main(argv: list[str] | None = None) -> str:
    args = STUDY.parse(__doc__, argv)
    with torch_threads(args.threads):
        entry = args_entry(args)
        records = run_conll_grid(args, entry, conll_grid(args))
    model = entry.meta.get("model")
    text = (f"CoNLL-2003 dev, {model} FE, {args.epochs} epochs, lr {args.lr:g}, batch {args.batch_size}, seeds "
            f"0..{args.seeds - 1}: best dev F1 x100 (mean ± std (runs)), seconds per run\n\n"
            + table(records, split_list(args.fusions), sorted(split_list(args.shots, int))))
    return STUDY.publish(args, argv, text, title=f"FE heads on CoNLL-2003 ({model})", records=records, entry=entry)


if __name__ == "__main__":
    main()
