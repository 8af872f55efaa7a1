"""What reading an entry over `layerfuse serve` costs against reading it from the local disk, in MB/s:
zarr (train-head's read of every layer, through fsspec's HTTP filesystem remotely) and files (N
concurrent readers, each reading every file whole).

The entry is random float16 rows (ROWS x 7 x 384) in a temporary root unless --cache names one;
the server runs in this process on 127.0.0.1, sharing the machine's cores with the clients.

    python scripts/bench_serve.py --rows 16384 --readers 16 --repeats 3

`entries` reads files in 1 MiB chunks: Starlette's default 64 KiB chunks made remote reads two to
three times slower.
"""

from __future__ import annotations

import argparse
import http.client
import os
import secrets
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from _common import call_seconds, cpu_line, results_path, write_results

from layerfuse.cache.reader import open_entry
from layerfuse.cache.writer import SplitPlan, SplitWriter
from layerfuse.serve.state import ServerState
from layerfuse.serve.threaded import BackgroundServer

LAYERS, WIDTH = 7, 384


def synthetic_entry(root: Path, *, rows: int, unit_rows: int = 4096) -> str:
    path = str(root / "synthetic__random__bench")
    attrs = {"format_version": 1, "model": "synthetic", "model_revision": "-", "dataset_fingerprint": "-",
             "granularity": "word", "pooling": "first", "dtype": "float16", "max_length": 512, "precision": "fp32",
             "key": "bench", "num_layers": LAYERS - 1, "hidden_size": WIDTH, "num_heads": 12, "ffn_dim": 1536,
             "dataset": "random", "label_names": ["O"], "entity_types": [],
             "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    plan = SplitPlan(n_layers=LAYERS, dim=WIDTH, dtype="float16", offsets=np.arange(0, rows + 1, 16, dtype=np.int64),
                     labels=np.zeros(rows, dtype=np.int16), words=["w"] * rows, unit_rows=unit_rows, plan_id="bench")
    writer = SplitWriter.open(path, attrs, "train", plan)
    rng = np.random.default_rng(0)
    for unit in range(plan.n_units):
        lo, hi = plan.unit_range(unit)
        writer.write_unit(unit, rng.standard_normal((hi - lo, LAYERS, WIDTH), dtype=np.float32).astype(np.float16))
    writer.finish({})
    return path


def timed(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls after one warm-up (page cache, connections)."""
    fn()
    return statistics.median(call_seconds(fn, repeats))


def read_files_local(entry: str, files: list[str]) -> int:
    return sum(len(Path(entry, f).read_bytes()) for f in files)


def read_files_remote(url: str, name: str, files: list[str]) -> int:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    total = 0
    for f in files:
        conn.request("GET", f"/entries/{name}/{f}")
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"{f}: HTTP {response.status}")
        total += len(response.read())
    conn.close()
    return total


def concurrent(fn, readers: int) -> None:
    with ThreadPoolExecutor(max_workers=readers) as pool:
        for future in [pool.submit(fn) for _ in range(readers)]:
            future.result()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", default=None, help="an entry to read (default: a synthetic one in a temporary root)")
    p.add_argument("--rows", type=int, default=16384)
    p.add_argument("--readers", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--report", default=results_path("bench_serve"), help="markdown file written ('' = print only)")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        entry = os.path.abspath(args.cache or synthetic_entry(Path(tmp), rows=args.rows))
        name = os.path.basename(entry)
        files = sorted(os.path.relpath(os.path.join(d, f), entry) for d, _, fs in os.walk(entry) for f in fs)
        entry_bytes = sum(os.path.getsize(os.path.join(entry, f)) for f in files)
        state = ServerState(root=Path(os.path.dirname(entry)), token=secrets.token_urlsafe(32))
        with BackgroundServer(state) as server:
            remote = f"{server.url}/entries/{name}"
            hidden_bytes = open_entry(entry).split("train").hidden().nbytes
            zarr_local = timed(lambda: open_entry(entry).split("train").hidden(), args.repeats)
            zarr_remote = timed(lambda: open_entry(remote).split("train").hidden(), args.repeats)
            files_local = timed(lambda: concurrent(lambda: read_files_local(entry, files), args.readers), args.repeats)
            files_remote = timed(lambda: concurrent(lambda: read_files_remote(server.url, name, files), args.readers),
                                 args.repeats)

    mb = 1e6
    moved = args.readers * entry_bytes
    lines = [
        cpu_line(),
        f"entry {name}: {len(files)} files, {entry_bytes / mb:.1f} MB; server in this process on 127.0.0.1; "
        f"median of {args.repeats}",
        f"zarr, split train hidden() ({hidden_bytes / mb:.1f} MB): local {hidden_bytes / zarr_local / mb:,.0f} "
        f"MB/s, remote {hidden_bytes / zarr_remote / mb:,.0f} MB/s ({zarr_local / zarr_remote:.2f} of local)",
        f"files, {args.readers} concurrent readers ({moved / mb:.0f} MB): local {moved / files_local / mb:,.0f} MB/s, "
        f"remote {moved / files_remote / mb:,.0f} MB/s ({files_local / files_remote:.2f} of local)",
    ]
    print("\n".join(lines))
    if args.report:
        write_results(args.report, "\n\n".join(lines[1:]), title="Reading an entry over `layerfuse serve`",
                      script="bench_serve", argv=None)


if __name__ == "__main__":
    main()
