"""`extract --precision bf16` as a user's choice: its speed against fp32, and whether heads trained
on the bf16 cache score like heads trained on the fp32 one (CoNLL-2003, all-MiniLM-L6-v2; concat
and dwatt, N = 128, 3 seeds, layercache's defaults; test F1 at the best dev point).

    python scripts/compare_extract_precision.py

Extracts the CoNLL-2003 train, dev and test splits twice (forward in fp32, then under bf16
autocast; both stored as float16) into --cache-dir, unless already there; the words/s are those
`extract` itself records for each split. Then runs the heads on each cache through
`layercache.experiments.run_grid` (results in --out, one file per cache; reruns skip runs done).
The table goes to --table (docs/results/compare_extract_precision.md).
"""

from __future__ import annotations

import argparse
import os
import statistics

from _common import CONLL, REPO, conll_data, dev_line, results_path, say, write_results


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=CONLL)
    p.add_argument("--cache-dir", default=str(REPO / "runs" / "extract_precision" / "cache"),
                   help="a root of its own, so both precisions are extracted side by side in one run")
    p.add_argument("--fusions", default="concat,dwatt")
    p.add_argument("--shots", type=int, default=128)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--out", default=str(REPO / "runs" / "extract_precision"))
    p.add_argument("--table", default=results_path("compare_extract_precision"),
                   help="markdown file written ('' = print only)")
    return p.parse_args(argv)


def cache_of(args, precision: str):
    """The entry, and the words/s its extraction recorded (train and dev together)."""
    from layercache.cache.reader import open_entry
    from layercache.extract.run import ExtractConfig, extract

    result = extract(ExtractConfig(model="all-MiniLM-L6-v2", dataset=conll_data(args.data),
                                   precision=precision, cache_dir=args.cache_dir), progress=True, log=say)
    entry = open_entry(result.path)
    stats = [entry.split(s).attrs for s in ("train", "dev") if s in entry.splits]
    words = sum(a["n_words"] for a in stats)
    seconds = sum(a["seconds"] for a in stats)
    return entry, words / seconds


def main(argv=None) -> str:
    from layercache.experiments import grid, run_grid
    from layercache.training import TrainConfig

    args = parse_args(argv)
    lines = ["| forward | words/s (train + dev) | fusion | dev F1 | test F1 |", "|---|---:|---|---:|---:|"]
    runs = {}
    for precision in ("fp32", "bf16"):
        entry, wps = cache_of(args, precision)
        base = TrainConfig(fusion="base", shots=args.shots, epochs=args.epochs, seed=0, eval_points=5)
        configs = grid(fusions=args.fusions.split(","), shots=[args.shots], epochs=[args.epochs], trials=args.seeds,
                       base=base)
        results = os.path.join(args.out, f"{precision}.jsonl")
        runs[precision] = list(run_grid(entry, configs, results=results, workers=args.workers, log=say).values())
        for fusion in args.fusions.split(","):
            mine = [r for r in runs[precision] if r["config"]["fusion"] == fusion]
            dev = statistics.mean(100 * r["best_dev_f1"] for r in mine)
            test = statistics.mean(100 * r["test_f1_at_best"] for r in mine)
            lines.append(f"| {precision} | {wps:,.0f} | {fusion} | {dev:.2f} | {test:.2f} |")
    lines += ["", "bf16 minus fp32, seed by seed (dev F1 x100): " + ", ".join(
        f"{f}: " + " ".join(f"{100 * (b['best_dev_f1'] - a['best_dev_f1']):+.2f}" for a, b in _pairs(runs, f))
        for f in args.fusions.split(","))]
    text = "\n".join(lines)
    print(text)
    if args.table:
        write_results(args.table, text, title="`extract --precision bf16` against fp32",
                      script="compare_extract_precision", argv=argv,
                      dev=dev_line(None, entry.split("dev").n_sentences))
    return text


def _pairs(runs: dict, fusion: str):
    key = lambda r: r["config"]["seed"]  # noqa: E731
    fp32 = sorted((r for r in runs["fp32"] if r["config"]["fusion"] == fusion), key=key)
    bf16 = sorted((r for r in runs["bf16"] if r["config"]["fusion"] == fusion), key=key)
    return zip(fp32, bf16)


if __name__ == "__main__":
    main()
