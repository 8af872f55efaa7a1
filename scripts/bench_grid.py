"""The paper's Figure-3 grid at roberta-large shape, extraction included, timed per phase and set
against what the hardware could do at best.

    python scripts/bench_grid.py --out runs/grid                       # the 300-run grid (a GPU)
    python scripts/bench_grid.py --out runs/grid --shots 8 --epochs 5 --trials 1 --eval-points 2

The encoder is `_common.build_encoder`'s (random weights, MiniLM's tokenizer) over CoNLL-2003; the
grid trains in this process, one run (or --pack runs) at a time. Phases: extract (skipped when the
entry is there), load into the activation store, train and evaluate (the runs' own clocks). The
limit: the heads' FLOPs (6 x parameters per trained row, 2 x per evaluated row) at a large matmul's
peak, plus the bytes they read at a large copy's bandwidth, both measured here. Writes --report
(bench_grid_gpu.md on CUDA) and its figures as JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

from _common import (
    CONLL,
    MACHINE_ARG,
    build_encoder,
    machine_line,
    public_path,
    results_path,
    say,
    write_dataset,
    write_results,
)

ADAM_BYTES_PER_WEIGHT = 28  # float32 weight, gradient, two moments read (16); weight, two moments written (12)


def median_s(fn, device, *, repeats: int = 5) -> float:
    """Median seconds (the device's clock) of ``repeats`` calls of ``fn``, after one untimed."""
    from layerfuse.training.runtime import now

    fn()
    times = []
    for _ in range(repeats):
        t0 = now(device)
        fn()
        times.append(now(device) - t0)
    return statistics.median(times)


def peak_matmul_flops(device, precision: str, *, n: int = 4096) -> float:
    """FLOP/s of an n x n x n matmul in the run's precision."""
    import torch

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n**3 / median_s(lambda: a @ b, device)


def copy_bandwidth(device, *, nbytes: int = 1 << 30) -> float:
    """Bytes/s moved by a large copy (read and write counted)."""
    import torch

    src = torch.empty(nbytes // 2, dtype=torch.float16, device=device).normal_()
    dst = torch.empty_like(src)
    return 2 * nbytes / median_s(lambda: dst.copy_(src), device)


def prepare(args) -> tuple[object, dict]:
    """The entry (extracted here when missing: `resolve_entry` does what `extract` does) and the
    extract phase's figures."""
    from layerfuse.cache.manage import list_entries
    from layerfuse.experiments.find import resolve_entry

    if args.cache:
        return resolve_entry(cache=args.cache), {"extract_s": None, "extract_note": "--cache: extracted before"}
    work = Path(args.out)
    model = Path(args.model) if args.model else build_encoder(work / "encoder")
    data = write_dataset(work / "conll", Path(args.data), {"train": None, "dev": None, "test": None})
    root = work / "cache"
    before = {e.path for e in list_entries(str(root), sizes=False) if e.complete} if root.exists() else set()
    t0 = time.perf_counter()
    # extract's default forward, fp32, is the faster one on a GPU (docs/results/gpu_check.md)
    entry = resolve_entry(model=str(model), dataset=str(data), cache_dir=str(root),
                          extract_options={"precision": "fp32"}, log=say)
    if entry.path in before:
        return entry, {"extract_s": None, "extract_note": "already extracted: reused"}
    return entry, {"extract_s": time.perf_counter() - t0, "extract_note": "fp32 forward, float16 cache"}


def per_head_table(records: list[dict]) -> str:
    """Per fusion: the median milliseconds of a training step, seconds of an evaluation pass, and
    seconds of the rest of a run over its runs (each run's own clocks: its train seconds over its
    steps, its eval seconds over its passes, dev and test at the best point; the rest: its total
    less both, its sample, set-up and layer-usage pass; in a pack each run's share of the pack's)."""
    by_fusion: dict = {}
    for r in records:
        passes = len(r["evals"]) + (1 if r.get("test_f1_at_best") is not None else 0)
        seconds = r["seconds"]
        by_fusion.setdefault(r["config"]["fusion"], []).append(
            (1e3 * seconds["train"] / r["total_steps"], seconds["eval"] / passes,
             seconds["total"] - seconds["train"] - seconds["eval"]))
    lines = ["| fusion | runs | a step, ms (median) | an evaluation pass, s (median) | the rest of a run, s (median) |",
             "|---|---:|---:|---:|---:|"]
    for fusion, times in by_fusion.items():
        lines.append(f"| {fusion} | {len(times)} | {statistics.median(t[0] for t in times):.2f} "
                     f"| {statistics.median(t[1] for t in times):.3f} | {statistics.median(t[2] for t in times):.2f} |")
    return "\n".join(lines)


def render_per_head(records_path: str, report: str, machine: str | None = None) -> str:
    """The per-head table of a grid's run records (its grid.jsonl), written under the machine they ran on."""
    from layerfuse.experiments import read_results

    records = list(read_results(records_path).values())
    seconds = {part: sum(r["seconds"][part] for r in records) for part in ("train", "eval", "total")}
    text = ("Each run's own clocks, from the grid's records (`" + public_path(records_path) + "`); the first run of "
            f"each fusion includes its warm-up. {len(records)} runs, {sum(r['total_steps'] for r in records):,} "
            f"steps; their clocks add up to {seconds['train']:,.1f} s training, {seconds['eval']:,.1f} s evaluating "
            f"and {seconds['total']:,.1f} s in all. AdamW read and wrote at least "
            f"{sum(ADAM_BYTES_PER_WEIGHT * r['params'] * r['total_steps'] for r in records) / 1e12:,.1f} TB for them "
            f"({ADAM_BYTES_PER_WEIGHT} bytes a weight a step).\n\n" + per_head_table(records))
    machine = machine or f"{records[0]['device']}; torch {records[0]['versions']['torch']}"
    write_results(report, text, title="The Figure-3 grid at roberta-large shape, per head", script="bench_grid",
                  argv=None, machine=machine)
    print(Path(report).read_text())
    return text


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None, help="work folder: encoder, dataset, cache, results file (required to run)")
    p.add_argument("--data", default=str(CONLL), help="a CoNLL-2003 folder")
    p.add_argument("--cache", default=None, help="an entry extracted before (skips the extract phase)")
    p.add_argument("--model", default=None,
                   help="an encoder folder (default: a roberta-large-shaped one with random weights, built once)")
    p.add_argument("--fusions", default="concat,dwatt,extra")
    p.add_argument("--shots", default="8,16,32,64,128")
    p.add_argument("--epochs", default="25,50,75,100")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--eval-points", type=int, default=5)
    p.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    p.add_argument("--pack", type=int, default=None,
                   help="runs per pack (default: sweep's, `packs.default_pack`: packs on CUDA, one at a time on a CPU)")
    p.add_argument("--resume", metavar="JSONL", default=None,
                   help="the run records (grid.jsonl) of an earlier invocation of this grid on the same entry that "
                        "was stopped: its runs are not run again, and the report counts its wall time "
                        "(--resume-wall-s) beside this one's")
    p.add_argument("--resume-wall-s", type=float, default=None,
                   help="with --resume: the earlier invocation's wall time, all phases (the timeout that stopped it)")
    p.add_argument("--report", default=None)
    p.add_argument("--per-head", metavar="JSONL", default=None,
                   help="run nothing: write the per-head table of a grid's records (its grid.jsonl) to --report")
    p.add_argument("--machine", default=None, help="with --per-head: the machine line (the records name only 'cuda')")
    args = p.parse_args(argv)
    if args.per_head:
        return render_per_head(args.per_head, args.report or results_path("bench_grid_gpu_per_head"), args.machine)
    if not args.out:
        p.error("--out is required")

    import torch

    from layerfuse.experiments import grid, run_grid
    from layerfuse.experiments.loaders import load_cached
    from layerfuse.experiments.packs import default_pack
    from layerfuse.experiments.results import read_results
    from layerfuse.training import TrainConfig, load_data
    from layerfuse.training.runtime import pick_device

    device = pick_device(None)
    t_all = time.perf_counter()
    entry, figures = prepare(args)
    base = TrainConfig(fusion="concat", shots=None, epochs=1, seed=0, lr=1e-3, eval_points=args.eval_points,
                       precision=args.precision, device=str(device))
    configs = grid(fusions=args.fusions.split(","), shots=[int(x) for x in args.shots.split(",")],
                   epochs=[int(x) for x in args.epochs.split(",")], trials=args.trials, base=base)
    pack = args.pack or default_pack(entry, configs, device)
    say(f"{len(configs)} runs on {device}, packs of up to {pack}")
    t0 = time.perf_counter()
    load_cached(entry, configs)  # into this process's activation store: the grid below reads nothing more
    figures["load_s"] = time.perf_counter() - t0
    results = str(Path(args.out) / "grid.jsonl")
    if os.path.exists(results):
        os.remove(results)  # every invocation times the whole grid, or (--resume) what the earlier one left
    if args.resume:
        earlier = Path(args.resume).read_text()
        keys = {json.loads(line).get("cache_key") for line in earlier.splitlines() if line.strip()}
        if keys != {entry.meta.get("key")}:
            p.error(f"--resume {args.resume}: its runs are on entry {sorted(map(str, keys))}, "
                    f"not {entry.meta.get('key')}")
        if args.resume_wall_s is None:
            p.error("--resume needs --resume-wall-s, the earlier invocation's wall time")
        Path(results).write_text(earlier)
        figures.update(resumed_runs=len(earlier.splitlines()), resumed_wall_s=args.resume_wall_s)
    t0 = time.perf_counter()
    try:
        records = list(run_grid(entry, configs, results=results, workers=0, pack=pack, log=say).values())
    except KeyboardInterrupt:  # a time cap (`timeout --signal=INT`): report the phases and the runs finished
        records = list(read_results(results).values())  # the runs written whole
        if not records:
            raise
        say(f"stopped after {len(records)} of {len(configs)} runs: reporting those")
    figures.update(runs_s=time.perf_counter() - t0, pack=pack, wall_s=time.perf_counter() - t_all,
                   planned_runs=len(configs), stopped=len(records) < len(configs))
    dev_rows = load_data(entry, layers=[entry.num_layers]).dev.n_words  # from the store: no read
    test_rows = entry.split("test").n_rows if "test" in entry.splits else 0
    steps = sum(r["total_steps"] for r in records)
    passes = sum(len(r["evals"]) + (1 if r.get("test_f1_at_best") is not None else 0) for r in records)
    train_rows = sum(r["n_train_words"] * r["config"]["epochs"] for r in records)
    eval_rows = sum(len(r["evals"]) * dev_rows + (test_rows if r.get("test_f1_at_best") is not None else 0)
                    for r in records)
    flops = sum(6 * r["params"] * r["n_train_words"] * r["config"]["epochs"]
                + 2 * r["params"] * (len(r["evals"]) * dev_rows + test_rows) for r in records)
    row_bytes = entry.num_layers * entry.dim * 2  # float16 cache rows over layers 1..L
    rows_bytes = (train_rows + eval_rows) * row_bytes
    # AdamW's least traffic a step: weights, gradients and both moments read, weights and moments
    # written, float32 (a roberta-large-shaped head has 25M weights: 0.7 GB a step, more than its rows)
    adam_bytes = sum(ADAM_BYTES_PER_WEIGHT * r["params"] * r["total_steps"] for r in records)
    nbytes = rows_bytes + adam_bytes
    peak, bandwidth = peak_matmul_flops(device, args.precision), copy_bandwidth(device)
    train_s = sum(r["seconds"]["train"] for r in records)
    eval_s = sum(r["seconds"]["eval"] for r in records)
    limit_s = flops / peak + nbytes / bandwidth
    runs_time = figures["runs_s"] if not args.resume else figures["wall_s"] + args.resume_wall_s  # resumed: all
    figures.update(runs=len(records), steps=steps, eval_passes=passes, train_s=train_s, eval_s=eval_s,
                   steps_per_s=steps / train_s if train_s else None, passes_per_s=passes / eval_s if eval_s else None,
                   head_flops=flops, cached_bytes=rows_bytes, adam_bytes=adam_bytes, peak_flops=peak,
                   bandwidth=bandwidth, limit_s=limit_s, fraction_of_limit=limit_s / runs_time,
                   machine=machine_line(str(device)),
                   mean_best_dev_f1=statistics.mean(r["best_dev_f1"] for r in records))
    rows = [("extract", figures["extract_s"], figures["extract_note"]),
            ("load into the store", figures["load_s"], "train samples, dev and test, layers 1..L"),
            ("train", train_s, f"{steps:,} steps, {figures['steps_per_s']:.1f} steps/s"),
            ("evaluate", eval_s, f"{passes:,} passes (dev, and test at the best point), "
                                 f"{figures['passes_per_s']:.2f} passes/s"),
            ("the grid", figures["runs_s"], f"{len(records)} runs: train, evaluate, and each run's sample, "
                                            f"set-up and layer-usage pass (`layer_usage`)"
                                            + (f"; stopped by an interrupt, {len(configs) - len(records)} of the "
                                               f"{len(configs)} not run" if figures["stopped"] else "")),
            ("wall, all phases", figures["wall_s"], "")]
    if args.resume:
        figures["wall_both_s"] = figures["wall_s"] + args.resume_wall_s
        rows[4] = ("the grid", figures["runs_s"], f"the {len(records) - figures['resumed_runs']} runs the earlier "
                                                  "invocation left: train, evaluate, set-up and layer usage")
        rows += [("an earlier invocation", args.resume_wall_s, f"stopped after {figures['resumed_runs']} runs "
                                                                f"(`--resume`): its extract, load and those runs"),
                 ("wall, both invocations", figures["wall_both_s"], "the whole grid")]
    table = ["| phase | seconds | what |", "|---|---:|---|"]
    table += [f"| {name} | {'-' if s is None else f'{s:,.1f}'} | {what} |" for name, s, what in rows]
    text = "\n".join([
        f"Grid: {args.fusions} x N = {args.shots} x epoch caps {args.epochs} x {args.trials} trial(s), lr "
        f"0.001, {args.precision}, {args.eval_points} evaluations on all of dev, test at the best, "
        f"packs of up to {pack} (a cell's caps and trials together when they fit), on {device}. "
        f"The entry: {entry.split('train').n_sentences:,} train, "
        f"{entry.split('dev').n_sentences:,} dev and {entry.split('test').n_sentences:,} test sentences.",
        "", *table, "",
        *([f"Train and evaluate: the runs' own clocks, all {len(records)} runs of both invocations.", ""]
          if args.resume else []),
        "Per head:", "", per_head_table(records), "",
        f"The hardware's limit for this grid: the heads' {flops / 1e12:,.1f} TFLOP at {peak / 1e12:,.2f} TFLOP/s "
        f"(a {args.precision} 4096^3 matmul here) is {flops / peak:,.1f} s; the {rows_bytes / 1e9:,.1f} GB of cached "
        f"rows they read and the {adam_bytes / 1e9:,.1f} GB AdamW reads and writes at least "
        f"({ADAM_BYTES_PER_WEIGHT} bytes a weight a step), at {bandwidth / 1e9:,.1f} GB/s (a 1 GiB copy here), "
        f"{nbytes / bandwidth:,.1f} s. Together {limit_s:,.1f} s: the grid ran at "
        f"{100 * figures['fraction_of_limit']:.0f}% of that limit.",
    ])
    report = args.report or results_path("bench_grid_gpu" if device.type == "cuda" else "bench_grid")
    write_results(report, text, title="The Figure-3 grid at roberta-large shape, by phase",
                  script="bench_grid", argv=argv, device=str(device))
    Path(report).with_suffix(".json").write_text(json.dumps(
        {"command": public_path(shlex.join(["python", "scripts/bench_grid.py",
                                            *(sys.argv[1:] if argv is None else argv)]), pattern=MACHINE_ARG),
         "torch": torch.__version__, **figures}, indent=1))
    print(Path(report).read_text())
    return text


if __name__ == "__main__":
    main()
