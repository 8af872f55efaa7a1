"""Extraction throughput, side by side in one run: (a) `extract`, (b) the forward pass alone on the
same length-sorted token-budget batches (the floor), (c) the naive recipe (batches of 16 in file
order, padded, output_hidden_states=True, every layer saved as fp32 with np.save per batch).
Also bytes per word stored vs the ideal (L+1)*d*2, and peak memory as the dataset grows.

    python scripts/bench_extract.py --data PATH/conll2003 --sentences 3000 --repeats 3
    python scripts/bench_extract.py --sentences 3000 --repeats 5 --where --memory-sizes ""   # + where the time goes

The figures go to --table (docs/results/bench_extract.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _common import CONLL, REPO, cpu_line, publish, results_path, run_floor, write_subset

from layerfuse.cache.manage import bytes_on_disk
from layerfuse.cache.writer import WRITES_ENV
from layerfuse.extract.models import load_model, load_tokenizer, model_info
from layerfuse.extract.run import ExtractConfig, extract


def run_extract(data: Path, root: str, *, writing: str = "direct") -> tuple[float, str]:
    """One `extract` call; ``writing`` (where the time goes, the writer's LAYERFUSE_SHARD_WRITES):
    ``direct`` as shipped, ``zarr`` with zarr's own pipeline writing the shards, ``none`` with
    nothing written (the shards' bytes dropped)."""
    before = os.environ.get(WRITES_ENV)
    os.environ[WRITES_ENV] = writing
    try:
        t0 = time.perf_counter()
        result = extract(ExtractConfig(dataset=str(data), cache_dir=root), progress=False, log=lambda m: None)
        return time.perf_counter() - t0, result.path
    finally:
        if before is None:
            os.environ.pop(WRITES_ENV)
        else:
            os.environ[WRITES_ENV] = before


def run_naive(words, out_dir: str) -> float:
    info = model_info(None)
    tok = load_tokenizer(info)
    model = load_model(info, device=torch.device("cpu"))
    t0 = time.perf_counter()
    for i in range(0, len(words), 16):
        enc = tok(words[i : i + 16], is_split_into_words=True, padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            hs = model(**enc, output_hidden_states=True).hidden_states
        np.save(os.path.join(out_dir, f"batch{i // 16:05d}.npy"), torch.stack(hs, 1).float().numpy())
    return time.perf_counter() - t0


def peak_rss_mb(data: Path, root: str) -> float:
    code = (
        f"import resource, sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from layerfuse.extract.run import ExtractConfig, extract\n"
        f"extract(ExtractConfig(dataset={str(data)!r}, cache_dir={root!r}), progress=False, log=lambda m: None)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=CONLL)
    ap.add_argument("--sentences", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory-sizes", default="1000,2000,4000,8000")
    ap.add_argument("--table", default=results_path("bench_extract"), help="markdown file written ('' = print only)")
    ap.add_argument("--where", action="store_true",
                    help="also (a) with zarr writing the shards and (a) with nothing written: where the time goes")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)

    tmp = Path(tempfile.mkdtemp(prefix="bench_extract_"))
    words = write_subset(args.data, args.sentences, tmp / "data")
    n_words = sum(len(w) for w in words)
    times = {k: [] for k in ("extract", "floor", "naive", *(("zarr", "none") if args.where else ()))}
    path = None
    for r in range(args.repeats):
        t, path = run_extract(tmp / "data", str(tmp / f"cache{r}"))
        times["extract"].append(t)
        for writing in ("zarr", "none") if args.where else ():
            times[writing].append(run_extract(tmp / "data", str(tmp / f"cache{r}{writing}"), writing=writing)[0])
        times["floor"].append(run_floor(words, None))
        (tmp / f"naive{r}").mkdir()
        times["naive"].append(run_naive(words, str(tmp / f"naive{r}")))
    med = {k: statistics.median(v) for k, v in times.items()}
    wps = {k: n_words / v for k, v in med.items()}
    info = model_info(None)
    ideal = (info.num_layers + 1) * info.hidden_size * 2
    stored = bytes_on_disk(path + "/train/hidden") / n_words

    lines = [f"{args.sentences} sentences, {n_words} words, {info.name}, torch threads {torch.get_num_threads()}, "
             f"medians of {args.repeats}", "", "| what | words/s (median) | runs (s) |", "|---|---:|---|"]
    rows = [("extract", "(a) extract, end to end"), ("floor", "(b) forward pass alone, same batches"),
            ("naive", "(c) naive: 16/batch, file order, fp32 np.save")]
    if args.where:
        rows += [("zarr", "(a) with zarr's pipeline writing the shards"), ("none", "(a) with nothing written")]
    for k, label in rows:
        lines.append(f"| {label} | {wps[k]:,.0f} | {', '.join(f'{x:.1f}' for x in times[k])} |")
    lines += ["", f"(a)/(b) = {wps['extract'] / wps['floor']:.2f}   (a)/(c) = {wps['extract'] / wps['naive']:.2f}"]
    if args.where:
        lines.append(f"of the floor: zarr writing {wps['zarr'] / wps['floor']:.2f}, "
                     f"nothing written {wps['none'] / wps['floor']:.2f}")
    lines += [cpu_line(), f"bytes/word stored: {stored:,.0f} vs ideal {ideal:,} -> {stored / ideal:.3f} x"]

    sizes = [int(s) for s in args.memory_sizes.split(",") if s]
    mem = {}
    for n in sizes:
        write_subset(args.data, n, tmp / f"mem{n}")
        mem[n] = peak_rss_mb(tmp / f"mem{n}", str(tmp / f"memcache{n}"))
    if mem:
        lines += ["", "peak RSS of extract by dataset size: "
                  + ", ".join(f"{n} sentences {m:,.0f} MB" for n, m in mem.items())]
    publish(args.table, "\n".join(lines), title="Extraction throughput", script="bench_extract", argv=None)


if __name__ == "__main__":
    main()
