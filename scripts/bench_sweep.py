"""The paper's few-shot grid on the MiniLM cache of CoNLL-2003, timed, and the speed-up over the
same runs with the backbone recomputed live (as without a cache).

    python scripts/bench_sweep.py --data PATH/conll2003 --out runs/sweep-conll --dev-sentences 1000

The 300 runs go through `sweep` itself (resumable; the wall time is this invocation's). With
--packs 1,5 the grid runs once per pack size, each into --out/pack-K: wall time of each and each
run's F1 against its unpacked run. The live cost adds to each run's head time the backbone forward
passes it would need (one per step, one over dev per evaluation), timed here. --redraw draws
f1_vs_shots.png again from the committed report.md. The report and bench_sweep.json go to --docs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _common import CONLL, REPO, call_seconds, conll_data, conll_entry, cpu_line, results_path, write_results

from layerfuse.experiments import grid, read_results, run_grid, run_sweep
from layerfuse.experiments.report import render
from layerfuse.extract.datasets import load_dataset
from layerfuse.extract.models import load_model, load_tokenizer, model_info
from layerfuse.training import TrainConfig
from layerfuse.training.runtime import resolve_precision

FUSIONS = "dwatt,concat,extra"  # the grid's heads, as the roofline's


def live_forward_costs(data_dir: str, *, dev_sentences: int | None, repeats: int = 20) -> dict:
    """Seconds of one MiniLM forward (all hidden states, no grad) over a random train batch of 16,
    and over the evaluation set in length-sorted batches of 64."""
    info = model_info(None)
    tok = load_tokenizer(info)
    model = load_model(info, device=torch.device("cpu"))
    ds = load_dataset(conll_data(data_dir), splits=["train", "dev"])
    train = [w for w, _ in ds.splits["train"]]
    dev = [w for w, _ in ds.splits["dev"]]
    if dev_sentences:
        keep = np.sort(np.random.default_rng(0).choice(len(dev), dev_sentences, replace=False))
        dev = [dev[i] for i in keep]
    rng = np.random.default_rng(0)

    def forward(batch):
        enc = tok(batch, is_split_into_words=True, padding=True, truncation=True, return_tensors="pt")
        with torch.inference_mode():
            model(**enc, output_hidden_states=True)

    batches = [[train[i] for i in rng.choice(len(train), 16, replace=False)] for _ in range(repeats)]
    step = [call_seconds(lambda b=b: forward(b), 1)[0] for b in batches]
    dev = sorted(dev, key=len)
    evals = call_seconds(lambda: [forward(dev[i:i + 64]) for i in range(0, len(dev), 64)], 3)
    return {"train_step_forward": statistics.median(step), "eval_forward": statistics.median(evals)}


def measure_head_costs(entry, *, dev_sentences: int | None, precision: str) -> dict:
    """Seconds per optimizer step and per evaluation of each head, N = 128, one thread, measured
    here in the same invocation as the live backbone's costs (so both see the same machine): the
    same runs twice through `run_grid` in this process (the data loaded once), into two throwaway
    results files; the first pass meets every batch shape's kernels once, the second is timed."""
    configs = [TrainConfig(fusion=fusion, shots=128, epochs=4, seed=0, eval_points=2,
                           dev_sentences=dev_sentences, precision=precision) for fusion in FUSIONS.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("warm", "timed"):
            records = run_grid(entry, configs, results=os.path.join(tmp, f"{name}.jsonl"), workers=0,
                               progress=False, log=lambda m: None)
    return {r["config"]["fusion"]: {"step": r["seconds"]["train"] / r["total_steps"],
                                    "eval": r["seconds"]["eval"] / len(r["evals"])} for r in records.values()}


def reference_kernel_ms(repeats: int = 200) -> float:
    """Median ms of one fixed bfloat16 product (DWAtt's value projection at N=128, one thread): how
    fast this machine is at the moment. A shared machine varies; the grid's wall time with it."""
    x = torch.randn(6, 256, 384, dtype=torch.bfloat16)
    w = torch.randn(6, 384, 192, dtype=torch.bfloat16)
    return 1e3 * statistics.median(call_seconds(lambda: torch.bmm(x, w), repeats)[10:])


def project(costs: dict, head: dict, *, trials: int = 5, eval_points: int = 5) -> dict:
    """Compute time of the full grid from per-step and per-evaluation costs, cached vs live."""
    cached = live = 0.0
    for c in head.values():
        for shots in (8, 16, 32, 64, 128):
            for epochs in (25, 50, 75, 100):
                steps = -(-shots * 4 // 16) * epochs
                cached += trials * (steps * c["step"] + eval_points * c["eval"])
                live += trials * (steps * (c["step"] + costs["train_step_forward"])
                                  + eval_points * (c["eval"] + costs["eval_forward"]))
    return {"cached_seconds": cached, "live_seconds": live, "speedup": live / cached}


def roofline_table(precision: str, fusions: str, *, steps: int = 40, pack: int = 1) -> str:
    """scripts/bench_roofline.py's table for ``precision`` (run in its own process; nothing written)."""
    command = [sys.executable, str(REPO / "scripts" / "bench_roofline.py"), "--precision", precision,
               "--fusions", fusions, "--steps", str(steps), "--pack", str(pack), "--table", ""]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def pack_comparison(by_pack: dict, walls: dict, packs: list[int]) -> dict:
    """Per pack size: wall seconds, summed train and evaluation seconds, and |dF1| (points) of each
    run against the same run in the first pack size, per fusion and over all."""
    first = by_pack[packs[0]]

    def totals(records, gaps) -> dict:
        return {"train_seconds": sum(r["seconds"]["train"] for r in records),
                "eval_seconds": sum(r["seconds"]["eval"] for r in records),
                "f1_gap_mean": statistics.mean(gaps), "f1_gap_max": max(gaps)}

    rows = {}
    for k in packs:
        runs = by_pack[k]
        gaps = {rid: 100 * abs(r["best_dev_f1"] - first[rid]["best_dev_f1"]) for rid, r in runs.items()}
        by_fusion: dict = {}
        for rid in gaps:
            by_fusion.setdefault(runs[rid]["config"]["fusion"], []).append(rid)
        rows[k] = {"wall_seconds": walls[k], **totals(runs.values(), list(gaps.values())),
                   "per_fusion": {f: totals([runs[r] for r in rids], [gaps[r] for r in rids])
                                  for f, rids in by_fusion.items()}}
    return rows


def packs_table(summary: dict) -> str:
    """The pack comparison of a bench_sweep.json as markdown: the grid's wall time per pack size, then
    per fusion the seconds its runs spent training and evaluating (summed over runs; a packed run's
    share of its pack's) and |dF1| against the first pack size; then the roofline with packed steps."""
    packs = summary["packs"]
    first = next(iter(packs))
    lines = [f"{summary['runs']} runs, {summary['workers']} workers, {summary['precision']}; reference product "
             f"{summary['reference_product_ms']['before']:.2f} ms before the grid, "
             f"{summary['reference_product_ms']['after']:.2f} ms after (the machine's speed).", "",
             "| pack | wall (min) | speed-up | train (min, summed) | evaluation (min, summed) "
             "| mean \\|ΔF1\\| | max \\|ΔF1\\| |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for k, row in packs.items():
        speedup = packs[first]["wall_seconds"] / row["wall_seconds"]
        lines.append(f"| {k} | {row['wall_seconds'] / 60:.1f} | {speedup:.2f}x "
                     f"| {row['train_seconds'] / 60:.1f} | {row['eval_seconds'] / 60:.1f} | {row['f1_gap_mean']:.2f} "
                     f"| {row['f1_gap_max']:.2f} |")
    lines += ["", "| fusion | pack | train (min) | evaluation (min) | mean \\|ΔF1\\| | max \\|ΔF1\\| |",
              "|---|---:|---:|---:|---:|---:|"]
    for fusion in packs[first]["per_fusion"]:
        for k, row in packs.items():
            f = row["per_fusion"][fusion]
            lines.append(f"| {fusion} | {k} | {f['train_seconds'] / 60:.1f} | {f['eval_seconds'] / 60:.1f} "
                         f"| {f['f1_gap_mean']:.2f} | {f['f1_gap_max']:.2f} |")
    return "\n".join(lines + ["", "One step at N = 128 (`scripts/bench_roofline.py`, the same invocation):", "",
                              summary["roofline"]])


def redraw(docs: str, steps_from: str | None = None) -> str:
    """Figure 3 of the committed report in ``docs`` drawn again from its report.md, training nothing;
    with ``steps_from`` (per-run records of the cap's runs at the smallest and largest N), its
    f1_vs_step.png too."""
    from layerfuse.experiments.report import draw_f1_vs_shots, plot_f1_vs_step, stats_from_table, trials_from_table

    text = (Path(docs) / "report.md").read_text(encoding="utf-8")
    title = text.split("\n", 1)[0].removeprefix("# Sweep: ").strip()
    # what the dev scores were measured on
    subset = re.search(r"subset of ([\d,]+) (?:of the [\d,]+ )?dev sentences", text)
    ylabel = f"best dev F1\n(dev subset of {subset.group(1)} sentences)" if subset else "best dev F1"
    drawn = [draw_f1_vs_shots(stats_from_table(text), str(Path(docs) / "f1_vs_shots.png"), title=title, ylabel=ylabel,
                              trials=trials_from_table(text))]
    if steps_from:
        records = list(read_results(steps_from).values())
        shots = sorted({r["config"]["shots"] for r in records})
        drawn.append(plot_f1_vs_step(records, str(Path(docs) / "f1_vs_step.png"), shots=[shots[0], shots[-1]],
                                     title=title))
    return "\n".join(drawn)


def write_packs(path: Path, summary: dict, machine: str | None = None) -> None:
    write_results(path, packs_table(summary), title="The few-shot grid, one run at a time and in packs",
                  script="bench_sweep", argv=None, machine=machine)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=CONLL)
    ap.add_argument("--out", default=str(REPO / "runs/sweep-conll"), help="the sweep's results folder")
    ap.add_argument("--docs", default=results_path("bench_sweep", ""),
                    help="the report (table and plots) and bench_sweep.json go here")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--dev-sentences", type=int, default=None, help="default: all of dev")
    ap.add_argument("--packs", default="1", help="comma-separated pack sizes, each a whole grid (1: unpacked)")
    ap.add_argument("--packs-table", metavar="JSON", default=None,
                    help="run nothing: write packs.md beside a bench_sweep.json made with --packs")
    ap.add_argument("--redraw", action="store_true",
                    help="run nothing: redraw f1_vs_shots.png in --docs from the table of its report.md (for a "
                         "report whose per-run results file is not at hand; f1_vs_step.png needs the runs)")
    ap.add_argument("--steps-from", metavar="JSONL", default=None,
                    help="with --redraw: per-run records (a sweep's results.jsonl) to draw f1_vs_step.png from")
    args = ap.parse_args()
    if args.packs_table:
        summary = json.loads(Path(args.packs_table).read_text())
        write_packs(Path(args.packs_table).with_name("packs.md"), summary, machine=summary["cpu"])
        return
    if args.redraw:
        print(redraw(args.docs, args.steps_from))
        return

    entry = conll_entry(args.data)
    precision = resolve_precision("auto")
    base = TrainConfig(fusion="base", shots=None, epochs=1, seed=0, eval_points=5, dev_sentences=args.dev_sentences,
                       precision=precision)
    configs = grid(fusions=FUSIONS.split(","), shots=[8, 16, 32, 64, 128], epochs=[25, 50, 75, 100],
                   trials=args.trials, base=base, layer_score=["scaled"])
    torch.set_num_threads(1)  # as each sweep worker runs on this 2-core machine
    reference_before = reference_kernel_ms()
    packs = [int(k) for k in args.packs.split(",")]
    walls, by_pack = {}, {}
    for k in packs:
        t0 = time.perf_counter()
        out = args.out if packs == [1] else os.path.join(args.out, f"pack-{k}")
        by_pack[k] = run_sweep(entry, configs, out=out, pack=k)
        walls[k] = time.perf_counter() - t0
    records, wall = list(by_pack[packs[0]].values()), walls[packs[0]]
    os.makedirs(args.docs, exist_ok=True)
    paths = render(records, args.docs)
    title, body = Path(paths["table"]).read_text().split("\n", 1)
    write_results(paths["table"], body, title=title.lstrip("# "), script="bench_sweep", argv=None)
    reference_after = reference_kernel_ms()

    costs = live_forward_costs(args.data, dev_sentences=args.dev_sentences)
    head_costs = measure_head_costs(entry, dev_sentences=args.dev_sentences, precision=precision)
    grid_costs = project(costs, head_costs)
    head = sum(r["seconds"]["total"] for r in records)
    summary = {"runs": len(records), "wall_seconds_this_invocation": wall, "head_seconds_sum": head, **costs,
               "workers": os.cpu_count(), "precision": precision,
               "reference_product_ms": {"before": reference_before, "after": reference_after}}
    print(open(paths["table"]).read())
    print(cpu_line())
    print(f"{len(records)} runs; wall {wall / 60:.1f} min this invocation ({summary['workers']} workers, "
          f"{precision}); sum of per-run head seconds {head / 60:.1f} min")
    print(f"machine speed: reference product {reference_before:.2f} ms before the grid, {reference_after:.2f} ms after")
    for fusion, c in head_costs.items():
        print(f"  {fusion:<7} {c['step'] * 1e3:6.1f} ms per step (N=128, batch 16), {c['eval']:5.2f} s per evaluation; "
              f"live backbone adds {costs['train_step_forward'] * 1e3:.0f} ms and {costs['eval_forward']:.1f} s "
              f"-> {(c['step'] + costs['train_step_forward']) / c['step']:.1f}x per step")
    print(f"full grid from these per-step costs, one thread: cached {grid_costs['cached_seconds'] / 3600:.1f} h "
          f"of compute, live backbone {grid_costs['live_seconds'] / 3600:.1f} h -> the cache makes the grid "
          f"{grid_costs['speedup']:.1f}x cheaper")
    if len(packs) > 1:
        summary["packs"] = pack_comparison(by_pack, walls, packs)
        for k, row in summary["packs"].items():
            print(f"pack {k}: wall {row['wall_seconds'] / 60:.1f} min ({walls[packs[0]] / row['wall_seconds']:.2f}x "
                  f"of pack {packs[0]}); train {row['train_seconds'] / 60:.1f} min, evaluation "
                  f"{row['eval_seconds'] / 60:.1f} min summed over runs; |dF1| against pack {packs[0]}: mean "
                  f"{row['f1_gap_mean']:.2f}, max {row['f1_gap_max']:.2f} (points)")
    summary.update(per_step={"head": head_costs, "grid": grid_costs}, cpu=cpu_line(),
                   roofline=roofline_table(precision, FUSIONS, pack=max(packs)))
    print(summary["roofline"])
    Path(args.docs, "bench_sweep.json").write_text(json.dumps(summary, indent=2))
    if len(packs) > 1:
        write_packs(Path(args.docs, "packs.md"), summary)


if __name__ == "__main__":
    main()
