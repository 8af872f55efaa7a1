"""Reading a split's layers from the cache into the training store: one layer after another, then
stacked (the former way), against the layers read side by side in threads straight into their
places (`CacheSplit.stored`, what the store reads now).

    python scripts/bench_cache_read.py --cache ENTRY --split dev --repeats 5

Both read the same rows (all of the split, every layer 1..L) and are checked equal; they alternate,
so each repeat sees the same machine (the cache's files stay in the page cache after the first read,
a warm-up read left out). Writes ``--report`` (docs/results/bench_cache_read.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import results_path, write_results


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True, help="a cache entry")
    p.add_argument("--split", default="dev")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--report", default=None)
    args = p.parse_args(argv)

    import numpy as np

    from layerfuse.cache.reader import open_entry

    entry = open_entry(args.cache)
    split = entry.split(args.split)
    layers = list(range(1, entry.num_layers + 1))

    def one_after_another():
        return np.stack([split._read_layer(layer, None) for layer in layers], axis=1)

    def side_by_side():
        return split.stored(layers=layers)[0]

    if not np.array_equal(one_after_another(), side_by_side()):  # also the warm-up read
        raise SystemExit("the two reads differ")
    times = {"one layer after another, then stacked": [], "side by side in threads (`stored`)": []}
    for _ in range(args.repeats):
        for name, read in zip(times, (one_after_another, side_by_side)):
            t0 = time.perf_counter()
            values = read()
            times[name].append(time.perf_counter() - t0)
    seconds = {name: statistics.median(t) for name, t in times.items()}
    serial, threaded = seconds.values()
    text = "\n".join([
        f"{entry.meta.get('model')} over {entry.meta.get('dataset')}, split {args.split}: {values.shape[0]:,} rows x "
        f"{len(layers)} layers x {values.shape[2]} ({values.nbytes / 1e6:,.0f} MB, {values.dtype}); medians of "
        f"{args.repeats} alternating reads.", "",
        "| read | seconds | MB/s |", "|---|---:|---:|",
        *(f"| {name} | {s:.3f} | {values.nbytes / 1e6 / s:,.0f} |" for name, s in seconds.items()),
        f"| speed-up | {serial / threaded:.2f}x | |",
    ])
    report = args.report or results_path("bench_cache_read")
    write_results(report, text, title="Reading a split's layers into the training store", script="bench_cache_read",
                  argv=argv)
    print(text)
    return text


if __name__ == "__main__":
    main()
