"""Packed against one-at-a-time training of the same small grid (`sweep --pack K`, issue 27): the wall
time of each and how far each packed run's F1 lands from its solo run's.

    python scripts/bench_pack.py --cache <entry> --fusions concat,dwatt --shots 8 --seeds 5 --epochs 10
    python scripts/bench_pack.py --cache <entry> --shots 8,16 --lrs 1e-3,3e-3 --seeds 2 --report x.md  # mixed packs

Per fusion, the runs train solo and then in packs of --pack (default: all of a fusion's runs), both
in this process into throwaway results files, after an untimed warm-up of each way. With dropout a
packed head draws other masks than its solo run; ``--dropout 0`` isolates the packing itself.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import results_path, say, split_list, torch_threads, write_results


def main(argv=None) -> str:
    from layerfuse.cache.reader import open_entry
    from layerfuse.experiments import grid, run_grid
    from layerfuse.training import TrainConfig

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True, help="a cache entry path")
    p.add_argument("--fusions", default="concat,dwatt")
    p.add_argument("--shots", default="8", help="comma-separated N")
    p.add_argument("--lrs", default="", help="comma-separated learning rates (default: each fusion's own)")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..S-1")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--pack", type=int, default=None, help="runs per pack (default: all of a fusion's runs)")
    p.add_argument("--eval-points", type=int, default=5)
    p.add_argument("--dropout", type=float, default=TrainConfig.dropout)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--report", default=results_path("bench_pack"), help="markdown file written")
    args = p.parse_args(argv)
    shots, axes = split_list(args.shots, int), ({"lr": split_list(args.lrs, float)} if args.lrs else {})
    pack = args.pack or args.seeds * len(shots) * len(axes.get("lr", [None]))
    entry = open_entry(args.cache)
    base = TrainConfig(fusion="base", shots=shots[0], epochs=args.epochs, seed=0, eval_points=args.eval_points,
                       dropout=args.dropout, precision=args.precision)
    rows, totals, gaps = [], {1: 0.0, pack: 0.0}, []
    with torch_threads(1), tempfile.TemporaryDirectory() as tmp:
        for fusion in split_list(args.fusions):
            configs = grid(fusions=[fusion], shots=shots, epochs=[args.epochs], trials=args.seeds, base=base, **axes)
            records, seconds = {}, {}
            warm = grid(fusions=[fusion], shots=shots[:1], epochs=[1], trials=2, base=base)
            for k in (1, 2):  # untimed: the first runs of a process pay for kernels and allocations once
                run_grid(entry, warm, results=str(Path(tmp) / f"warm-{fusion}-{k}.jsonl"), workers=0, pack=k,
                         progress=False, log=lambda m: None)
            for k in (1, pack):
                say(f"{fusion}: {len(configs)} runs, pack {k}")
                t0 = time.perf_counter()
                records[k] = run_grid(entry, configs, results=str(Path(tmp) / f"{fusion}-{k}.jsonl"), workers=0,
                                      pack=k, progress=False, log=say)
                seconds[k] = time.perf_counter() - t0
                totals[k] += seconds[k]
            diffs = [100 * abs(records[pack][rid]["best_dev_f1"] - record["best_dev_f1"])
                     for rid, record in records[1].items()]
            gaps += diffs
            evals = {k: statistics.mean(r["seconds"]["eval"] for r in records[k].values()) for k in records}
            rows.append(f"| {fusion} | {len(configs)} | {seconds[1]:.1f} | {seconds[pack]:.1f} | "
                        f"{seconds[1] / seconds[pack]:.2f}x | {evals[1]:.2f} | {evals[pack]:.2f} | "
                        f"{statistics.mean(diffs):.2f} | {max(diffs):.2f} |")
    rows.append(f"| all | {len(gaps)} | {totals[1]:.1f} | {totals[pack]:.1f} | {totals[1] / totals[pack]:.2f}x | | | "
                f"{statistics.mean(gaps):.2f} | {max(gaps):.2f} |")
    text = "\n".join([
        f"N = {args.shots}, {'learning rates ' + args.lrs + ', ' if args.lrs else ''}{args.seeds} seeds,"
        f" {args.epochs} epochs, {args.eval_points} dev evaluations per run, "
        f"dropout {args.dropout}, {args.precision}, 1 thread(s), packs of {pack}; "
        f"on `{Path(args.cache).name}`. Wall seconds of the whole grid per fusion (data loading included, once "
        "per pass), one run at a time and packed; evaluation seconds per run (a packed run's share of its pack's); "
        "|ΔF1|: best dev F1 (x100) of each packed run against its solo run.",
        "", "| fusion | runs | one at a time (s) | packed (s) | speed-up | eval s/run, alone | eval s/run, packed | "
        "mean \\|ΔF1\\| | max \\|ΔF1\\| |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|", *rows])
    write_results(args.report, text, title="Packed heads: `sweep --pack` against one run at a time",
                  script="bench_pack", argv=argv)
    print(text)
    return text


if __name__ == "__main__":
    main()
