"""Does the training-free variability score pick layers that do as well as fusing all of them?

FE heads on CoNLL-2003 with all-MiniLM-L6-v2: for each fusion, N and seed, one run per layer choice
(all layers, auto:K = the K layers with the lowest nu on the run's own sample, and the top K layers
for comparison). Each run reads exactly what it needs from the cache with `load_for_run` (its
train sample with the candidate layers, all of 1..L for auto:K so they can be ranked, and dev with
only the fused layers), so the bytes it loads are part of the answer. Appends one JSON line per run
to --out and skips runs already there (an interrupted run resumes), then prints a markdown table:
best dev F1 (mean ± std over seeds), the layers fused, median seconds and MB loaded per run.

    LAYERCACHE_HOME=/tmp/lc python scripts/compare_layers_conll.py                # the full grid
    LAYERCACHE_HOME=/tmp/lc python scripts/compare_layers_conll.py --seeds 1 --shots 8 --out /tmp/x.jsonl

The cache is the one `extract --model all-MiniLM-L6-v2 --dataset <data> --splits train,dev` makes
(extracted here first when missing); its root is --cache-dir, else $LAYERCACHE_HOME.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # runnable from a checkout without installing

from layercache.heads.sweep import append_result, run_id, runs_on  # noqa: E402
from layercache.heads.data import load_for_run, parse_layer_spec  # noqa: E402
from layercache.heads.find import resolve_entry  # noqa: E402
from layercache.heads.train import TrainConfig, train_head  # noqa: E402

FUSIONS = "concat,dwatt"
CHOICES = "all,auto:2,auto:3,5-6,4-6"  # all 1..6, nu's best 2 and 3, the top 2 and 3 layers


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(REPO / ".." / "shared" / "data" / "conll2003"),
                   help="CoNLL-2003 directory (default: ../shared/data/conll2003 from the repo root)")
    p.add_argument("--model", default="all-MiniLM-L6-v2")
    p.add_argument("--cache", default=None, help="a cache entry path (skips the lookup by model and data)")
    p.add_argument("--cache-dir", default=None, help="cache root (default: $LAYERCACHE_HOME)")
    p.add_argument("--fusions", default=FUSIONS)
    p.add_argument("--choices", default=CHOICES,
                   help="layer choices, separated by commas at the top level; a choice is one --layers spec, "
                        "with '-' or '..' ranges or '+' between layers (5-6, 4+5+6, 1..6), 'all' or 'auto:K'")
    p.add_argument("--shots", default="8,128", help="comma-separated N (N x C sentences per run)")
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..S-1")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--eval-points", type=int, default=5, help="evenly spaced dev evaluations per run (full dev)")
    p.add_argument("--device", default=None)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: another job shares the cores); 0 leaves torch's default")
    p.add_argument("--out", default=str(REPO / "runs" / "compare_layers_conll.jsonl"), help="JSON lines, one per run")
    return p.parse_args(argv)


def parse_choices(text: str) -> list[str]:
    """``"all,auto:2,5-6,4+5+6"`` -> ``["all", "auto:2", "5-6", "4,5,6"]`` (``+`` joins the layers of
    one choice, since commas separate choices)."""
    return [c.strip().replace("+", ",") for c in text.split(",") if c.strip()]


def _layers_text(layers) -> str:
    return ",".join(str(x) for x in layers)


def table(records: list[dict], fusions: list[str], shots: list[int], choices: list[str], *, num_layers: int) -> str:
    """Markdown: one row per (fusion, N, layer choice); best dev F1 x100 (mean ± std over seeds, runs),
    the layers fused (per seed when they differ: auto:K), median wall seconds and mean MB loaded per run."""
    lines = ["| fusion | N | layers | dev F1 | layers fused | s/run | MB loaded/run |",
             "|---|---:|---|---|---|---:|---:|"]
    for fusion in fusions:
        for n in shots:
            for choice in choices:
                spec = parse_layer_spec(choice, num_layers=num_layers)
                name = choice if spec.k is not None or choice == "all" else _layers_text(spec.candidates)
                if choice == "all":
                    name = f"all ({spec.candidates[0]}..{spec.candidates[-1]})"
                runs = sorted((r for r in records if r["config"]["fusion"] == fusion and r["config"]["shots"] == n
                               and r["config"]["layers"] == choice), key=lambda r: r["config"]["seed"])
                if not runs:
                    lines.append(f"| {fusion} | {n} | {name} | - | - | - | - |")
                    continue
                scores = [100 * r["best_dev_f1"] for r in runs]
                std = statistics.stdev(scores) if len(scores) > 1 else 0.0
                picked = [_layers_text(r["layers"]) for r in runs]
                fused = picked[0] if len(set(picked)) == 1 and spec.k is None else " / ".join(picked)
                secs = statistics.median(r["wall_seconds"] for r in runs)
                mb = statistics.mean(r["bytes_loaded"] for r in runs) / 1e6
                lines.append(f"| {fusion} | {n} | {name} | {statistics.mean(scores):.1f} ± {std:.1f} ({len(runs)}) "
                             f"| {fused} | {secs:.1f} | {mb:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> str:
    """Runs what is not in --out yet, prints the table and returns it."""
    args = parse_args(argv)
    import torch

    threads_before, env_before = torch.get_num_threads(), os.environ.get("LAYERCACHE_NUM_THREADS")
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["LAYERCACHE_NUM_THREADS"] = str(args.threads)  # train_head applies it too
    try:
        return _main(args)
    finally:  # called from a test: leave the process as it was
        torch.set_num_threads(threads_before)
        if env_before is None:
            os.environ.pop("LAYERCACHE_NUM_THREADS", None)
        else:
            os.environ["LAYERCACHE_NUM_THREADS"] = env_before


def _main(args) -> str:
    fusions = [f.strip() for f in args.fusions.split(",") if f.strip()]
    choices = parse_choices(args.choices)
    shots = [int(n) for n in args.shots.split(",") if n.strip()]
    seeds = range(args.seeds)

    entry = resolve_entry(cache=args.cache, model=args.model, dataset=os.path.normpath(args.data),
                          cache_dir=args.cache_dir, extract_options={"splits": ("train", "dev")},
                          log=lambda m: print(m, file=sys.stderr))
    L = entry.num_layers
    for choice in choices:
        parse_layer_spec(choice, num_layers=L)  # a bad choice fails now, not after an hour of runs
    configs = [TrainConfig(fusion=f, shots=n, epochs=args.epochs, seed=s, lr=args.lr, batch_size=args.batch_size,
                           eval_points=args.eval_points, layers=c, device=args.device)
               for n in shots for s in seeds for f in fusions for c in choices]
    key = entry.meta["key"]
    done = runs_on(args.out, key)
    todo = [c for c in configs if run_id(c) not in done]
    print(f"{entry.path}: {len(configs) - len(todo)} of {len(configs)} runs already in {args.out}", file=sys.stderr)

    if todo:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    for i, config in enumerate(todo, 1):
        t0 = time.perf_counter()
        data = load_for_run(entry, layers=config.layers, shots=config.shots, seed=config.seed)  # this run's reads
        load_s = time.perf_counter() - t0
        nbytes = {"train": int(data.train.hidden.nbytes), "dev": int(data.dev.hidden.nbytes)}
        result = train_head(config, data, keep_tagger=False)
        record = result.to_dict()
        record.update(bytes_loaded=nbytes["train"] + nbytes["dev"], bytes=nbytes,
                      train_layers_loaded=list(data.train.layers), load_seconds=load_s,
                      wall_seconds=time.perf_counter() - t0)
        append_result(args.out, record)
        done[run_id(record["config"])] = record
        del data
        print(f"[{i}/{len(todo)}] {config.fusion:<6} N={config.shots:<4} seed {config.seed} layers {config.layers:<7} "
              f"-> {_layers_text(result.layers):<11}: dev F1 {result.best_dev_f1:.4f}  "
              f"{record['wall_seconds']:.1f} s (load {load_s:.1f}, train {result.seconds['train']:.1f}, "
              f"eval {result.seconds['eval']:.1f})  {record['bytes_loaded'] / 1e6:.1f} MB",
              file=sys.stderr, flush=True)

    wanted = {run_id(c) for c in configs}
    records = [r for k, r in done.items() if k in wanted]
    out = (f"CoNLL-2003 dev, {entry.meta.get('model')} FE, {args.epochs} epochs, lr {args.lr:g}, "
           f"batch {args.batch_size}, {args.eval_points} dev evaluations per run (full dev), "
           f"seeds 0..{args.seeds - 1}. "
           f"dev F1: best dev F1 x100, mean ± std over seeds (runs). layers fused: per seed "
           f"({' / '.join(str(s) for s in seeds)}) "
           f"where they differ. s/run: median wall seconds of a run, cache reads included. MB loaded/run: "
           f"mean over seeds of the bytes of hidden states read from the cache for the run (its train sample, "
           f"with all {L} layers for auto:K so they can be ranked, plus dev with the fused layers only), "
           f"float16 storage, so rows x layers x d x 2 bytes; MB = 10^6 bytes.\n\n"
           + table(records, fusions, shots, choices, num_layers=L))
    print("\n" + out)
    return out


if __name__ == "__main__":
    main()
