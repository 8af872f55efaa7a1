"""bfloat16 autocast against float32 on the same runs: what `sweep --precision auto` changes.

    python scripts/compare_precision.py --data PATH/conll2003

Runs one slice of the sweep grid twice through `sweep` itself (same seeds, so the same samples and
initialisations; both cores), once per precision, and prints per fusion the mean best dev F1 of
each, the paired difference (bf16 - fp32) and the spread over trials, plus the training time per
optimizer step of each. Results go to --out/fp32 and --out/bf16 (resumable), the table to --table
(docs/results/compare_precision.md).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from _common import CONLL, REPO, conll_entry, dev_line, publish, results_path

from layerfuse.experiments import grid, run_sweep
from layerfuse.training import TrainConfig


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=CONLL)
    ap.add_argument("--out", default=str(REPO / "runs/precision"))
    ap.add_argument("--fusions", default="dwatt,concat,extra")
    ap.add_argument("--shots", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=25)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--dev-sentences", type=int, default=1000)
    ap.add_argument("--table", default=results_path("compare_precision"),
                    help="markdown file written ('' = print only)")
    args = ap.parse_args()

    entry = conll_entry(args.data)
    runs = {}  # precision -> (fusion, seed) -> record
    for precision in ("fp32", "bf16"):
        base = TrainConfig(fusion="base", shots=None, epochs=1, seed=0, eval_points=5,
                           dev_sentences=args.dev_sentences, precision=precision)
        configs = grid(fusions=args.fusions.split(","), shots=[args.shots], epochs=[args.epochs],
                       trials=args.trials, base=base)
        records = run_sweep(entry, configs, out=str(Path(args.out, precision))).values()
        runs[precision] = {(r["config"]["fusion"], r["config"]["seed"]): r for r in records}
    fp32, bf16 = runs["fp32"], runs["bf16"]
    lines = [f"N={args.shots}, {args.epochs} epochs, {args.trials} trials, dev F1 x 100 on {args.dev_sentences} "
             f"dev sentences", "",
             "| fusion | fp32 F1 | bf16 F1 | paired diff (mean, max abs) | trial SD (fp32) | ms/step fp32 "
             "| ms/step bf16 |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for fusion in args.fusions.split(","):
        keys = sorted(k for k in fp32 if k[0] == fusion and k in bf16)
        a = [100 * fp32[k]["best_dev_f1"] for k in keys]
        b = [100 * bf16[k]["best_dev_f1"] for k in keys]
        diff = [y - x for x, y in zip(a, b)]
        step = {p: statistics.median(r["seconds"]["train"] / r["total_steps"] * 1e3 for k, r in recs.items()
                                     if k in keys) for p, recs in runs.items()}
        lines.append(f"| {fusion} | {statistics.mean(a):.1f} | {statistics.mean(b):.1f} "
                     f"| {statistics.mean(diff):+.1f}, {max(abs(d) for d in diff):.1f} | {statistics.stdev(a):.1f} "
                     f"| {step['fp32']:.1f} | {step['bf16']:.1f} |")
    text = "\n".join(lines)
    publish(args.table, text, title="bfloat16 autocast against float32 on the same runs",
            script="compare_precision", argv=None,
            dev=dev_line(args.dev_sentences, entry.split("dev").n_sentences))


if __name__ == "__main__":
    main()
