"""What the scripts share: the repository on ``sys.path`` (runnable from a checkout without
installing), the CoNLL-2003 data and cache they use, and for the grid scripts their common options,
their grid and how it runs (`layercache.experiments.run_grid`), and the F1 cell of their tables.

A script imports this first (``python scripts/NAME.py`` puts scripts/ on ``sys.path``). The
library is imported inside the functions, so a script that only needs ``REPO`` stays light.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CONLL = REPO.parent / "shared" / "data" / "conll2003"
MODEL = "all-MiniLM-L6-v2"


def say(message: str) -> None:
    """Progress goes to stderr: stdout is the table."""
    print(message, file=sys.stderr, flush=True)


def conll_entry(data: str | os.PathLike = CONLL, *, cache: str | None = None, model: str = MODEL,
                cache_dir: str | None = None, log=say):
    """``cache`` if given, else the entry `extract --model MODEL --dataset DATA` makes (train, dev
    and test: test F1 is reported at the best dev point) under ``cache_dir`` (else $LAYERCACHE_HOME),
    extracted first when missing."""
    from layercache.experiments import resolve_entry

    return resolve_entry(cache=cache, model=model, dataset=os.path.normpath(data), cache_dir=cache_dir,
                         log=log)


def grid_parser(description: str, *, fusions: str, epochs: int, threads: int | None,
                out: str) -> argparse.ArgumentParser:
    """The options every grid script takes; ``out`` is the results file's name under runs/."""
    from layercache.fusions.dwatt import LAYER_SCORES
    from layercache.training import PAPER_LR

    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", default=str(CONLL),
                   help="CoNLL-2003 directory (default: ../shared/data/conll2003 from the repo root)")
    p.add_argument("--model", default=MODEL)
    p.add_argument("--cache", default=None, help="a cache entry path (skips the lookup by model and data)")
    p.add_argument("--cache-dir", default=None, help="cache root (default: $LAYERCACHE_HOME)")
    p.add_argument("--fusions", default=fusions)
    p.add_argument("--shots", default="8,128", help="comma-separated N (N x C sentences per run, C entity types)")
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..S-1")
    p.add_argument("--lr", type=float, default=PAPER_LR, help="default: the paper's (these scripts reproduce its protocol)")
    p.add_argument("--layer-score", default="paper", choices=LAYER_SCORES,
                   help="DWAtt's score over layers (default: the paper's unscaled one)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--eval-points", type=int, default=5,
                   help="evenly spaced dev evaluations per run (0 = after every epoch)")
    p.add_argument("--device", default=None)
    p.add_argument("--threads", type=int, default=threads,
                   help="torch threads (sets LAYERCACHE_NUM_THREADS too); 0 leaves torch's default alone")
    p.add_argument("--workers", type=int, default=0,
                   help="worker processes (0 = this process, as the published timings were taken)")
    p.add_argument("--out", default=str(REPO / "runs" / out), help="JSON lines, one per run (reruns skip them)")
    return p


def split_list(text: str, cast=str) -> list:
    return [cast(x.strip()) for x in text.split(",") if x.strip()]


def args_entry(args):
    """The cache entry of a grid script's --data/--model/--cache/--cache-dir."""
    return conll_entry(args.data, cache=args.cache, model=args.model, cache_dir=args.cache_dir)


def conll_grid(args, *, axes: dict | None = None, **fields) -> list:
    """The `TrainConfig` of every run of --fusions x --shots x --seeds (x ``axes``, a field and its
    values), at --epochs; ``fields`` fixes more config fields for every run."""
    from layercache.experiments import grid
    from layercache.training import TrainConfig

    base = TrainConfig(fusion="base", shots=None, epochs=args.epochs, seed=0, lr=args.lr, batch_size=args.batch_size,
                       eval_points=args.eval_points or None, device=args.device,
                       layer_score=getattr(args, "layer_score", "paper"), **fields)
    return grid(fusions=split_list(args.fusions), shots=split_list(args.shots, int), epochs=[args.epochs],
                trials=args.seeds, base=base, **(axes or {}))


def run_conll_grid(args, entry, configs: list, **options) -> list[dict]:
    """`run_grid` into --out with --workers: the runs not there yet; the records of all ``configs``."""
    from layercache.experiments import run_grid

    return list(run_grid(entry, configs, results=args.out, workers=args.workers, log=say, **options).values())


@contextmanager
def torch_threads(n: int | None):
    """``n`` torch threads here and in `train_head` (LAYERCACHE_NUM_THREADS) for the block, then
    both as they were (a test calls main() in its own process); 0 or None changes nothing."""
    import torch

    before, env_before = torch.get_num_threads(), os.environ.get("LAYERCACHE_NUM_THREADS")
    if n:
        torch.set_num_threads(n)
        os.environ["LAYERCACHE_NUM_THREADS"] = str(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        if env_before is None:
            os.environ.pop("LAYERCACHE_NUM_THREADS", None)
        else:
            os.environ["LAYERCACHE_NUM_THREADS"] = env_before


def f1_cell(runs: list[dict], metric: str = "best_dev_f1") -> str:
    """Best dev F1 (or, with ``metric="test_f1_at_best"``, the test F1 at the best dev point) x100
    over ``runs``: 'mean ± std (runs)', '-' for none (a cache without a test split)."""
    scores = [100 * r[metric] for r in runs if r.get(metric) is not None]
    if not scores:
        return "-"
    std = statistics.stdev(scores) if len(scores) > 1 else 0.0
    return f"{statistics.mean(scores):.1f} ± {std:.1f} ({len(scores)})"


def runs_of(records: list[dict], **config) -> list[dict]:
    """The records whose config has every given field at the given value."""
    return [r for r in records if all(r["config"].get(k) == v for k, v in config.items())]
