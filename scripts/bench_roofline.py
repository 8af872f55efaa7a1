"""How close each head's training step comes to the machine's peak for matrix products.

For each head, on the sweep's N = 128 batch (16 CoNLL-like sentences packed, MiniLM shape, one
thread): the FLOPs of a step (matrix products, `FlopCounterMode`), its median time and GFLOP/s, the
peak of large products in the same precision, where its time goes (`torch.profiler`: products,
element-wise and other operators, the rest), and the ceiling: its own products replayed back to
back, the fraction of peak a step would reach if nothing else took time.

    python scripts/bench_roofline.py                  # fp32 and bf16
    python scripts/bench_roofline.py --precision bf16
    python scripts/bench_roofline.py --compiled concat,dwatt   # + the same steps through torch.compile
    python scripts/bench_roofline.py --pack 5         # + 5 heads stepped together (a GFLOP per step of all 5)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _common import call_seconds, cpu_line, head_step, publish, results_path

from layerfuse.training.memory import keep_freed_memory

PRODUCTS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_dot_product")


def peak_gflops(dtype: torch.dtype, *, repeats: int = 7) -> float:
    """Best GFLOP/s of large products (one thread) in ``dtype``: the roof."""
    best = 0.0
    for m, k, n in ((1024, 1024, 1024), (2048, 384, 1536), (2048, 1536, 384)):
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        a @ b
        best = max(best, 2 * m * k * n / min(call_seconds(lambda a=a, b=b: a @ b, repeats)) / 1e9)
    return best


def measure(fusion: str, precision: str, *, steps: int, pack: int = 1) -> dict:
    """FLOPs, median seconds and the profiler's split of one step (of ``pack`` heads at once)."""
    from torch.utils.flop_counter import FlopCounterMode

    step = head_step(fusion, precision, pack=pack)
    for _ in range(10):  # kernels built, memory kept
        step()
    counter = FlopCounterMode(display=False)
    with counter:
        step()
    return {"flops": counter.get_total_flops(), "seconds": statistics.median(call_seconds(step, steps)),
            **split(step), "products_alone": products_alone(step, steps=steps)}


def products_alone(step, *, steps: int) -> float:
    """Median seconds of one step's matrix products replayed alone (recorded from one step)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.__name__.split(".")[0]
            if any(name == p or name.startswith(p) for p in PRODUCTS):
                keep = lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x  # noqa: E731
                calls.append((func, [keep(a) for a in args], {k: keep(v) for k, v in kwargs.items()}))
            return func(*args, **kwargs)

    def replay():
        for func, args, kwargs in calls:
            func(*args, **kwargs)

    with Record():
        step()
    with torch.no_grad():
        return statistics.median(call_seconds(replay, steps))


def split(step, *, steps: int = 10) -> dict:
    """Fractions of a step's wall time in products, in other operators, and in neither."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        wall = time.perf_counter() - t0
    products = others = 0.0
    for event in prof.key_averages():
        if not event.key.startswith("aten::"):
            continue
        if any(event.key == f"aten::{p}" or event.key.startswith(f"aten::{p}") for p in PRODUCTS):
            products += event.self_cpu_time_total / 1e6
        else:
            others += event.self_cpu_time_total / 1e6
    return {"products": products / wall, "elementwise": others / wall, "rest": max(0.0, 1 - (products + others) / wall)}


def compiled_seconds(fusion: str, precision: str, *, steps: int) -> float:
    """Median seconds of the same step with its forward and loss compiled (the FLOPs are the same)."""
    step = head_step(fusion, precision, compiled=True)
    for _ in range(10):  # the first call compiles
        step()
    return statistics.median(call_seconds(step, steps))


def table(precisions: list[str], *, steps: int, fusions: list[str], compiled: list[str] = (), pack: int = 1) -> str:
    torch.set_num_threads(1)
    keep_freed_memory()
    lines = [cpu_line(), "",
             "| head | precision | GFLOP per step | ms per step | GFLOP/s | peak GFLOP/s | fraction of peak "
             "| time in products | other operators | Python and dispatch | products alone (ms) | ceiling |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    notes = []
    for precision in precisions:
        peak = peak_gflops(torch.bfloat16 if precision == "bf16" else torch.float32)
        fastest = 0.0
        for fusion in fusions:
            for k in sorted({1, pack}):
                m = measure(fusion, precision, steps=steps, pack=k)
                achieved = m["flops"] / m["seconds"] / 1e9
                fastest = max(fastest, achieved)
                name = fusion if k == 1 else f"{fusion}, pack of {k}"
                lines.append(f"| {name} | {precision} | {m['flops'] / 1e9:.3f} | {1e3 * m['seconds']:.1f} "
                             f"| {achieved:.1f} "
                             f"| {peak:.1f} | {achieved / peak:.2f} | {m['products']:.0%} | {m['elementwise']:.0%} "
                             f"| {m['rest']:.0%} | {1e3 * m['products_alone']:.1f} "
                             f"| {m['flops'] / m['products_alone'] / 1e9 / peak:.2f} |")
            if fusion in compiled:
                seconds = compiled_seconds(fusion, precision, steps=steps)
                achieved = m["flops"] / seconds / 1e9
                lines.append(f"| {fusion}, compiled | {precision} | {m['flops'] / 1e9:.3f} | {1e3 * seconds:.1f} "
                             f"| {achieved:.1f} | {peak:.1f} | {achieved / peak:.2f} | | | | | |")
        if fastest > peak:  # the large product fell to a slower kernel than the heads' small ones
            notes.append(f"{precision}: a head's step ran faster ({fastest:.1f} GFLOP/s) than the large product that "
                         f"sets the peak ({peak:.1f}), which fell to a slower kernel than the heads' small products "
                         f"(a CPU without {precision} units): the {precision} fractions of peak compare against "
                         f"no peak.")
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--precision", default="fp32,bf16", help="comma-separated: fp32, bf16")
    ap.add_argument("--fusions", default="concat,dwatt,extra")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--compiled", default="",
                    help="comma-separated heads also timed with torch.compile (e.g. concat,dwatt)")
    ap.add_argument("--pack", type=int, default=1, help="also time K heads stepped together (sweep --pack K)")
    ap.add_argument("--table", default=results_path("bench_roofline"), help="markdown file written ('' = print only)")
    args = ap.parse_args(argv)
    text = table(args.precision.split(","), steps=args.steps, fusions=args.fusions.split(","),
                 compiled=[f for f in args.compiled.split(",") if f], pack=args.pack)
    return publish(args.table, text, title="How close each head's training step comes to the peak",
                   script="bench_roofline", argv=argv)


if __name__ == "__main__":
    main()
