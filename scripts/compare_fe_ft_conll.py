"""FE against FT on CoNLL-2003 with all-MiniLM-L6-v2 (paper Figure 6): the same heads, the same
few-shot samples and the same dev sentences, trained on cached hidden states (FE) or on a live
backbone fine-tuned end to end with the head (FT).

Runs every fusion at each N for each seed in both modes, calling `train_head` in a loop: the FE
data (the union of the samples, all layers, and dev) is read from the cache once, the backbone is
loaded once (`train_head` resets it to its pretrained weights at the start of every FT run).
Appends one JSON line per run to --out and skips runs already there (so an interrupted run
resumes), then prints a markdown table of best dev F1 (mean ± std over seeds) and median seconds
per run, per fusion and N, and writes it to --table.

    python scripts/compare_fe_ft_conll.py                                 # 3 fusions x N=8,128 x 3 seeds x FE, FT
    python scripts/compare_fe_ft_conll.py --seeds 1 --shots 8 --epochs 1 --out /tmp/check.jsonl --table /tmp/check.md

FT evaluates live (a backbone forward over every dev sentence at every evaluation point), so by
default both modes evaluate on the same fixed random 1,000 sentences of dev (--dev-sentences) at
5 evenly spaced points (--eval-points).

The cache is the one `extract --model all-MiniLM-L6-v2 --dataset <data> --splits train,dev` makes
(extracted here first when missing); its root is --cache-dir, else $LAYERCACHE_HOME.
"""

from __future__ import annotations

import argparse
import os
import shlex
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
from layercache.heads.train import TrainConfig, pick_device, train_head  # noqa: E402

FUSIONS = "base,concat,dwatt"
MODES = ("fe", "ft")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(REPO / ".." / "shared" / "data" / "conll2003"),
                   help="CoNLL-2003 directory (default: ../shared/data/conll2003 from the repo root)")
    p.add_argument("--model", default="all-MiniLM-L6-v2")
    p.add_argument("--cache", default=None, help="a cache entry path (skips the lookup by model and data)")
    p.add_argument("--cache-dir", default=None, help="cache root (default: $LAYERCACHE_HOME)")
    p.add_argument("--fusions", default=FUSIONS)
    p.add_argument("--shots", default="8,128", help="comma-separated N (N x 4 sentences per run)")
    p.add_argument("--modes", default="fe,ft", help="fe, ft or both")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..S-1")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--eval-points", type=int, default=5, help="evenly spaced dev evaluations per run")
    p.add_argument("--dev-sentences", type=int, default=1000,
                   help="evaluate on this fixed random subset of dev (0 = all of dev)")
    p.add_argument("--device", default=None)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (sets LAYERCACHE_NUM_THREADS); 0 leaves torch's default alone")
    p.add_argument("--out", default=str(REPO / "runs" / "compare_fe_ft_conll.jsonl"), help="JSON lines, one per run")
    p.add_argument("--note", default="", help="a sentence added to the table's caption (e.g. how busy the machine was)")
    p.add_argument("--table", default=str(REPO / "docs" / "compare_fe_ft_conll.md"),
                   help="markdown file the table is written to ('' = print only)")
    return p.parse_args(argv)


def _f1(runs: list[dict]) -> str:
    if not runs:
        return "-"
    scores = [100 * r["best_dev_f1"] for r in runs]
    std = statistics.stdev(scores) if len(scores) > 1 else 0.0
    return f"{statistics.mean(scores):.1f} ± {std:.1f} ({len(runs)})"


def _seconds(runs: list[dict]) -> str:
    return f"{statistics.median(r['seconds']['total'] for r in runs):.1f}" if runs else "-"


def table(records: list[dict], fusions: list[str], shots: list[int]) -> str:
    """Markdown: per fusion and N, best dev F1 (x100, mean ± std over seeds (runs)) in FE and FT,
    their difference, median seconds per run in each mode and the trainable parameters of each."""
    lines = ["| fusion | N | FE dev F1 | FT dev F1 | FT − FE | FE s/run | FT s/run | FE params (head) "
             "| FT params (head + backbone) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for fusion in fusions:
        for n in shots:
            runs = {m: [r for r in records if r["config"]["fusion"] == fusion and r["config"]["shots"] == n
                        and r["config"]["mode"] == m] for m in MODES}
            fe, ft = runs["fe"], runs["ft"]
            diff = "-"
            if fe and ft:
                gain = statistics.mean(r["best_dev_f1"] for r in ft) - statistics.mean(r["best_dev_f1"] for r in fe)
                diff = f"{100 * gain:+.1f}"
            fe_params = f"{fe[0]['params']:,}" if fe else "-"
            ft_params = f"{ft[0]['params']:,} + {ft[0]['backbone_params']:,}" if ft else "-"
            lines.append(f"| {fusion} | {n} | {_f1(fe)} | {_f1(ft)} | {diff} | {_seconds(fe)} | {_seconds(ft)} "
                         f"| {fe_params} | {ft_params} |")
    return "\n".join(lines)


def caption(args, model: str | None, n_dev: int, device: str) -> str:
    dev = (f"a fixed random subset of {args.dev_sentences:,} of the {n_dev:,} dev sentences (the same for every "
           f"run, to keep FT's live evaluation affordable on CPU)"
           if args.dev_sentences and args.dev_sentences < n_dev else f"all {n_dev:,} dev sentences")
    threads = "torch's default threads"
    if args.threads:
        threads = f"{args.threads} torch thread{'s' if args.threads != 1 else ''}"
    return (f"CoNLL-2003, {model}: FE (heads on cached hidden states) against FT (the backbone fine-tuned end "
            f"to end with the head, from its pretrained weights in every run), paper Figure 6. Best dev "
            f"entity F1 x100, mean ± std over seeds 0..{args.seeds - 1} (runs), on {dev}, evaluated at "
            f"{args.eval_points} evenly spaced points per run. {args.epochs} epochs, lr {args.lr:g} (linear decay), "
            f"batch {args.batch_size}; N-way few-shot samples of N x 4 sentences, the same sample per seed in "
            f"both modes. FT − FE: difference of the means. s/run: median wall-clock seconds per run "
            f"(training and evaluation) on {device}, {threads}." + (f" {args.note}" if args.note else ""))


def main(argv=None) -> str:
    args = parse_args(argv)
    if args.threads:
        os.environ["LAYERCACHE_NUM_THREADS"] = str(args.threads)  # train_head applies it
        import torch

        torch.set_num_threads(args.threads)
    fusions = [f.strip() for f in args.fusions.split(",") if f.strip()]
    shots = [int(n) for n in args.shots.split(",") if n.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    seeds = range(args.seeds)
    configs = [TrainConfig(fusion=f, shots=n, epochs=args.epochs, seed=s, lr=args.lr, batch_size=args.batch_size,
                           eval_points=args.eval_points, dev_sentences=args.dev_sentences or None,
                           device=args.device, mode=m)
               for m in modes for n in shots for s in seeds for f in fusions]  # FE first: it is quick

    entry = resolve_entry(cache=args.cache, model=args.model, dataset=os.path.normpath(args.data),
                          cache_dir=args.cache_dir, extract_options={"splits": ("train", "dev")},
                          log=lambda m: print(m, file=sys.stderr))
    key = entry.meta["key"]
    done = runs_on(args.out, key)
    todo = [c for c in configs if run_id(c) not in done]
    print(f"{entry.path}: {len(configs) - len(todo)} of {len(configs)} runs already in {args.out}", file=sys.stderr)

    if todo:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    data = {}
    for i, config in enumerate(todo, 1):
        if config.mode not in data:
            data[config.mode] = _load(config.mode, entry, [c for c in todo if c.mode == config.mode], args)
        result = train_head(config, data[config.mode], keep_tagger=False)
        record = result.to_dict()
        if config.mode == "ft":  # trainable backbone parameters (all of them: nothing is frozen here)
            record["backbone_params"] = sum(p.numel() for p in data["ft"].backbone.model.parameters()
                                            if p.requires_grad)
        append_result(args.out, record)
        done[run_id(record["config"])] = record
        s = result.seconds
        print(f"[{i}/{len(todo)}] {config.mode} {config.fusion:<7} N={config.shots:<4} seed {config.seed}: "
              f"dev F1 {result.best_dev_f1:.4f} (epoch {result.best_epoch})  {s['total']:.1f} s "
              f"(train {s['train']:.1f}, eval {s['eval']:.1f})", file=sys.stderr, flush=True)

    wanted = {run_id(c) for c in configs}
    records = [r for k, r in done.items() if k in wanted]
    device = records[0]["device"] if records else str(pick_device(args.device))
    text = caption(args, entry.meta.get("model"), entry.split("dev").n_sentences, device) + "\n\n" \
        + table(records, fusions, shots)
    print("\n" + text)
    if args.table:
        os.makedirs(os.path.dirname(os.path.abspath(args.table)), exist_ok=True)
        given = argv if argv is not None else sys.argv[1:]
        command = shlex.join(["python", "scripts/compare_fe_ft_conll.py", *given])
        with open(args.table, "w", encoding="utf-8") as f:
            f.write(f"# FE against FT on CoNLL-2003\n\nMade by `{command}` "
                    f"(one JSON line per run in `{_shown(args.out)}`).\n\n"
                    + text + "\n")
    return text


def _shown(path: str) -> str:
    """A path relative to the repository when it is inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _load(mode: str, entry, todo: list[TrainConfig], args):
    """FE: the union of the samples the remaining FE runs need (all layers) and dev, read once.
    FT: the words and tags of every split around the live backbone, loaded once."""
    t0 = time.perf_counter()
    if mode == "fe":
        n_types = len(entity_types(entry.meta))
        n_train = entry.split("train").n_sentences
        need = np.unique(np.concatenate([few_shot_sample(n_train, shots=c.shots, n_types=n_types, seed=c.seed)
                                         for c in todo]))
        data = load_data(entry, train_sentences=need)
        print(f"FE: loaded {len(need):,} train sentences and dev ({data.dev.n_sentences:,} sentences, layers "
              f"{list(data.dev.layers)}) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        return data
    from layercache.heads.ft import live_data
    from layercache.heads.live import load_live_backbone
    backbone = load_live_backbone(entry.meta, device=pick_device(args.device))
    data = live_data(entry, backbone, layers=range(1, entry.num_layers + 1))
    print(f"FT: loaded {entry.meta.get('model')} and the words of train and dev in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return data


if __name__ == "__main__":
    main()
