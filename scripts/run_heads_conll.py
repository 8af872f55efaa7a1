"""Few-shot FE heads on CoNLL-2003 with all-MiniLM-L6-v2, for the README table.

Runs every fusion at each N for each seed (25 epochs by default), loading the cache once and
calling `train_head` in a loop; appends one JSON line per run to --out and skips runs already there
(so an interrupted run resumes), then prints a markdown table of best dev F1 (mean ± std over
seeds) and seconds per run.

    python scripts/run_heads_conll.py                      # the full grid: 5 fusions x N=8,128 x 3 seeds
    python scripts/run_heads_conll.py --seeds 1 --shots 8  # a quick check

The cache is the one `extract --model all-MiniLM-L6-v2 --dataset <data> --splits train,dev` makes
(extracted here first when missing); its root is --cache-dir, else $LAYERCACHE_HOME.

Cost on a 2-core AMD EPYC (AVX2, fp32), --threads 1, per run: N=128 base 2.4 s, concat 18 s,
dwatt 35 s, extra 52 s, scalarmix 4 s; N=8 2, 7, 13, 16, 2 s (the 5 evaluations on all 3,250 dev
sentences dominate at N=8). The full grid (3 seeds) is about 8 minutes.
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

import numpy as np  # noqa: E402

from layercache.heads.sweep import append_result, run_id, runs_on  # noqa: E402
from layercache.heads.data import entity_types, load_data  # noqa: E402
from layercache.heads.find import resolve_entry  # noqa: E402
from layercache.heads.sampling import few_shot_sample  # noqa: E402
from layercache.heads.train import TrainConfig, train_head  # noqa: E402

FUSIONS = "base,concat,dwatt,extra,scalarmix"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(REPO / ".." / "shared" / "data" / "conll2003"),
                   help="CoNLL-2003 directory (default: ../shared/data/conll2003 from the repo root)")
    p.add_argument("--model", default="all-MiniLM-L6-v2")
    p.add_argument("--cache", default=None, help="a cache entry path (skips the lookup by model and data)")
    p.add_argument("--cache-dir", default=None, help="cache root (default: $LAYERCACHE_HOME)")
    p.add_argument("--fusions", default=FUSIONS)
    p.add_argument("--shots", default="8,128", help="comma-separated N (N x 4 sentences per run)")
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..S-1")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--eval-points", type=int, default=5,
                   help="evenly spaced dev evaluations per run (0 = after every epoch)")
    p.add_argument("--device", default=None)
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (sets LAYERCACHE_NUM_THREADS); 1 is fastest when other jobs share the cores")
    p.add_argument("--out", default=str(REPO / "runs" / "heads_conll.jsonl"), help="JSON lines, one per run")
    return p.parse_args(argv)


def table(records: list[dict], fusions: list[str], shots: list[int]) -> str:
    """Markdown: best dev F1 (x100, mean ± std over seeds) and mean seconds per run, per fusion and N."""
    head = "| fusion | params | " + " | ".join(f"N={n} dev F1" for n in shots) + " | " \
        + " | ".join(f"N={n} s/run" for n in shots) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(shots))]
    for fusion in fusions:
        f1s, secs, params = [], [], "-"
        for n in shots:
            runs = [r for r in records if r["config"]["fusion"] == fusion and r["config"]["shots"] == n]
            if runs:
                params = f"{runs[0]['params']:,}"
            scores = [100 * r["best_dev_f1"] for r in runs]
            std = statistics.stdev(scores) if len(scores) > 1 else 0.0
            f1s.append(f"{statistics.mean(scores):.1f} ± {std:.1f} ({len(runs)})" if runs else "-")
            secs.append(f"{statistics.mean(r['seconds']['total'] for r in runs):.1f}" if runs else "-")
        lines.append(f"| {fusion} | {params} | " + " | ".join(f1s) + " | " + " | ".join(secs) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        os.environ["LAYERCACHE_NUM_THREADS"] = str(args.threads)  # train_head applies it
    fusions = [f.strip() for f in args.fusions.split(",") if f.strip()]
    shots = [int(n) for n in args.shots.split(",") if n.strip()]
    seeds = range(args.seeds)
    configs = [TrainConfig(fusion=f, shots=n, epochs=args.epochs, seed=s, lr=args.lr, batch_size=args.batch_size,
                           eval_points=args.eval_points or None, device=args.device)
               for n in shots for s in seeds for f in fusions]  # fusions innermost: one sample, five heads

    entry = resolve_entry(cache=args.cache, model=args.model, dataset=os.path.normpath(args.data),
                          cache_dir=args.cache_dir, extract_options={"splits": ("train", "dev")},
                          log=lambda m: print(m, file=sys.stderr))
    key = entry.meta["key"]
    done = runs_on(args.out, key)
    todo = [c for c in configs if run_id(c) not in done]
    print(f"{entry.path}: {len(configs) - len(todo)} of {len(configs)} runs already in {args.out}", file=sys.stderr)

    if todo:
        # Load once: the union of the samples the remaining runs need, all layers, plus dev.
        n_train = entry.split("train").n_sentences
        n_types = len(entity_types(entry.meta))
        need = np.unique(np.concatenate([few_shot_sample(n_train, shots=c.shots, n_types=n_types, seed=c.seed)
                                         for c in todo]))
        t0 = time.perf_counter()
        data = load_data(entry, train_sentences=need)
        print(f"loaded {len(need):,} train sentences and dev ({data.dev.n_sentences:,} sentences, layers "
              f"{list(data.dev.layers)}) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        for i, config in enumerate(todo, 1):
            result = train_head(config, data, keep_tagger=False)
            record = result.to_dict()
            append_result(args.out, record)
            done[run_id(record["config"])] = record
            s = result.seconds
            print(f"[{i}/{len(todo)}] {config.fusion:<9} N={config.shots:<4} seed {config.seed}: "
                  f"dev F1 {result.best_dev_f1:.4f} (epoch {result.best_epoch})  {s['total']:.1f} s "
                  f"(train {s['train']:.1f}, eval {s['eval']:.1f})", file=sys.stderr, flush=True)

    wanted = {run_id(c) for c in configs}
    records = [r for k, r in done.items() if k in wanted]
    print(f"\nCoNLL-2003 dev, {entry.meta.get('model')} FE, {args.epochs} epochs, lr {args.lr:g}, "
          f"batch {args.batch_size}, seeds 0..{args.seeds - 1}: best dev F1 x100 (mean ± std (runs)), seconds per run\n")
    print(table(records, fusions, sorted(shots)))


if __name__ == "__main__":
    main()
