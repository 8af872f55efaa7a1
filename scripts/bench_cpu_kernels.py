"""The CPU facts behind the training changes, measured side by side on one thread (medians):

1. a head-sized matrix product in float32 and bfloat16, with one shape reused and with a new shape
   on every call (oneDNN builds a kernel per new shape; training batches are therefore padded to a
   multiple of 32 rows);
2. dropout with torch's Bernoulli mask against layerfuse's 16-bit mask (forward and backward).

    python scripts/bench_cpu_kernels.py

The tables go to --table (docs/results/bench_cpu_kernels.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _common import publish, results_path

from layerfuse.fusions.dropout import dropout


def median_ms(fn, calls: int, repeats: int = 5) -> float:
    fn(0)
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        for i in range(calls):
            fn(r * calls + i)
        times.append((time.perf_counter() - t0) / calls * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", default=results_path("bench_cpu_kernels"),
                    help="markdown file written ('' = print only)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    K, N = 384, 1536  # MiniLM width -> FFN width
    lines = ["matrix product [rows, 384] x [384, 1536], ms per call (median of 5)", "",
             "| dtype | same shape (256 rows) | new shape every call (257.. rows) |", "|---|---:|---:|"]
    for dtype in (torch.float32, torch.bfloat16):
        w = torch.randn(K, N, dtype=dtype)
        inputs = [torch.randn(257 + i, K, dtype=dtype) for i in range(5 * 40 + 1)]
        fixed = torch.randn(256, K, dtype=dtype)
        same = median_ms(lambda i, fixed=fixed, w=w: fixed @ w, 40)
        new = median_ms(lambda i, inputs=inputs, w=w: inputs[i + 1] @ w, 40)
        lines.append(f"| {str(dtype).split('.')[-1]} | {same:.2f} | {new:.2f} |")

    x = torch.randn(256, 1536, requires_grad=True)
    torch_ms = median_ms(lambda i: torch.nn.functional.dropout(x, 0.1, True).sum().backward(), 20)
    ours_ms = median_ms(lambda i: dropout(x, 0.1).sum().backward(), 20)
    lines += ["", f"dropout p=0.1 on [256, 1536] ({x.numel():,} elements), forward + backward, ms per call", "",
              "| dropout | ms per call |", "|---|---:|",
              f"| torch.nn.functional.dropout | {torch_ms:.2f} |", f"| layerfuse.fusions.dropout | {ours_ms:.2f} |"]
    text = "\n".join(lines)
    publish(args.table, text, title="CPU kernels: product shapes and dropout masks",
            script="bench_cpu_kernels", argv=None)


if __name__ == "__main__":
    main()
