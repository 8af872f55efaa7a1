"""The write path of `extract` alone, float16 against int8, side by side: what extraction costs once
the forward pass is free (on a GPU it nearly is, so this bounds words/s there).

Each way writes the same random units through `SplitWriter.write_unit`, timed from the rows the
writer receives to the unit flagged done: float16 rows; int8 quantised by the writer from float32
(a CPU's extraction); int8 quantised before the clock starts (a GPU's).

    python scripts/bench_int8_write.py                       # roberta-large shape: 25 x 1024
    python scripts/bench_int8_write.py --layers 7 --dim 384  # MiniLM
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
from _common import cpu_line, results_path, write_results

from layerfuse.cache.codec import CODECS
from layerfuse.cache.manage import bytes_on_disk
from layerfuse.cache.writer import SplitPlan, SplitWriter
from layerfuse.extract.entry import default_unit_rows

WAYS = {  # name: (stored dtype, what reaches the writer)
    "float16": ("float16", "float16"),
    "int8, quantised by the writer (CPU extraction)": ("int8", "float32"),
    "int8, quantised on the device (GPU extraction)": ("int8", "int8"),
}


def plan(layers: int, dim: int, dtype: str, units: int) -> SplitPlan:
    unit_rows = default_unit_rows(layers, dim, 2)  # as `extract` sizes a unit (int8: as float16's)
    n = unit_rows * units
    offsets = np.arange(0, n + 1, 16, dtype=np.int64)  # 16-word sentences; the writer does not look
    return SplitPlan(n_layers=layers, dim=dim, dtype=dtype, offsets=offsets, labels=np.zeros(n, dtype=np.int16),
                     words=["w"] * n, unit_rows=unit_rows, plan_id=dtype)


def write_split(root: str, plan: SplitPlan, units: list) -> float:
    """Seconds to write ``units`` (each: rows, or (rows, scales)) as one split of a fresh entry."""
    attrs = {"num_layers": plan.n_layers - 1, "hidden_size": plan.dim, "dtype": plan.dtype, "key": "bench"}
    writer = SplitWriter.open(root, attrs, "train", plan)
    t0 = time.perf_counter()
    for u, unit in enumerate(units):
        rows, scales = unit if isinstance(unit, tuple) else (unit, None)
        writer.write_unit(u, rows, scales=scales)
    return time.perf_counter() - t0


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=25, help="L + 1 (embeddings included)")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--units", type=int, default=3, help="units written per repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--table", default=results_path("bench_int8_write"), help="markdown file written ('' = print only)")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    plans = {name: plan(args.layers, args.dim, dtype, args.units) for name, (dtype, _) in WAYS.items()}
    unit_rows = next(iter(plans.values())).unit_rows
    # Hidden states are heavy-tailed (a few outlier dimensions): a t distribution, not a normal one.
    source = [rng.standard_t(4, (unit_rows, args.layers, args.dim)).astype(np.float32) for _ in range(args.units)]
    given = {"float16": [u.astype(np.float16) for u in source], "float32": source,
             "int8": [CODECS["int8"].encode(u) for u in source]}
    seconds = {name: [] for name in WAYS}
    per_row = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats + 1):  # round 0 warms up imports, the page cache and the shard buffer
            for i, (name, (_, fed)) in enumerate(WAYS.items()):
                root = f"{tmp}/{r}-{i}"
                s = write_split(root, plans[name], given[fed])
                if r:
                    seconds[name].append(s)
                per_row[name] = bytes_on_disk(root) / plans[name].n_rows
    rows = unit_rows * args.units
    base = statistics.median(seconds["float16"])
    lines = [f"{args.units} units of {unit_rows:,} rows x {args.layers} layers x {args.dim}, written to a fresh "
             f"split; medians of {args.repeats} rounds, the ways interleaved in each.", "",
             "| what reaches the writer | bytes per word | words/s | time against float16 |", "|---|---:|---:|---:|"]
    for name, s in seconds.items():
        median = statistics.median(s)
        lines.append(f"| {name} | {per_row[name]:,.0f} | {rows / median:,.0f} | {median / base:.2f}x |")
    text = "\n".join(lines)
    print(text + "\n" + cpu_line())
    if args.table:
        write_results(args.table, text, title="The write path alone: float16 against int8",
                      script="bench_int8_write", argv=argv)
    return text


if __name__ == "__main__":
    main()
