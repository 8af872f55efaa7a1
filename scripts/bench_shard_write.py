"""What writing one shard of the cache costs in CPU (user + kernel, every thread of the process), the
way zarr writes it and the way `extract` writes it now (`layerfuse/cache/shard.py`).

A MiniLM unit: 32,768 rows x 7 layers x 384, float16 (176 MB), into a fresh array each time, as
`extract` writes a new entry. On a 2-core machine this CPU is taken from the forward pass's threads.

    python scripts/bench_shard_write.py --repeats 5

The table goes to --table (docs/results/bench_shard_write.md).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from _common import cpu_line, results_path, write_results

from layerfuse.cache.shard import shard_files
from layerfuse.cache.store import CHECKSUM

ROWS, LAYERS, WIDTH = 32768, 7, 384


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fresh_array(root: Path, *, write_empty_chunks: bool):
    group = zarr.open_group(str(root), mode="w")
    array = group.create_array("hidden", shape=(ROWS, LAYERS, WIDTH), dtype="float16", shards=(ROWS, LAYERS, WIDTH),
                               chunks=(1024, 1, WIDTH), compressors=[CHECKSUM], fill_value=0)
    return array.with_config({"write_empty_chunks": True}) if write_empty_chunks else array


def zarr_pipeline(root: Path, rows: np.ndarray, *, write_empty_chunks: bool) -> None:
    fresh_array(root, write_empty_chunks=write_empty_chunks)[:] = rows


def shard_py(root: Path, rows: np.ndarray, *, direct: bool) -> None:
    files = shard_files(fresh_array(root, write_empty_chunks=True))
    files.direct = direct
    files.write(0, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--table", default=results_path("bench_shard_write"),
                    help="markdown file written ('' = print only)")
    args = ap.parse_args()
    rows = np.random.default_rng(0).standard_normal((ROWS, LAYERS, WIDTH)).astype(np.float16)
    ways = {
        "zarr's pipeline (the release before)": lambda root: zarr_pipeline(root, rows, write_empty_chunks=False),
        "zarr's pipeline, write_empty_chunks on": lambda root: zarr_pipeline(root, rows, write_empty_chunks=True),
        "shard.py, through the page cache": lambda root: shard_py(root, rows, direct=False),
        "shard.py, O_DIRECT where taken (extract now)": lambda root: shard_py(root, rows, direct=True),
    }

    results = {name: {"cpu": [], "wall": []} for name in ways}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats + 1):  # the first round warms up imports and the kept buffer
            for i, (name, write) in enumerate(ways.items()):
                c0, t0 = cpu_seconds(), time.perf_counter()
                write(Path(tmp) / f"{r}-{i}")
                if r:
                    results[name]["cpu"].append(cpu_seconds() - c0)
                    results[name]["wall"].append(time.perf_counter() - t0)
    lines = [f"one shard: {ROWS} x {LAYERS} x {WIDTH} float16 = {rows.nbytes / 1e6:.0f} MB; medians of {args.repeats}",
             "", "| how | CPU s (user + kernel) | wall s |", "|---|---:|---:|"]
    for name, r in results.items():
        lines.append(f"| {name} | {statistics.median(r['cpu']):.3f} | {statistics.median(r['wall']):.3f} |")
    text = "\n".join(lines)
    print(text + "\n" + cpu_line())
    if args.table:
        write_results(args.table, text, title="What writing one shard costs in CPU", script="bench_shard_write",
                      argv=None)


if __name__ == "__main__":
    main()
