"""One training step of each head (the sweep's N = 128 batch, at `sweep`'s ``--precision auto``, one
thread), in fresh processes run in alternation, so the machine's drift hits every variant alike.
Variants: ``kept`` (as shipped, freed memory kept for reuse), ``returned`` (glibc's default,
``LAYERFUSE_KEEP_HEAP=0``) and ``einsum`` (DWAtt only: the earlier token-major forward).

Prints the median ms and page faults per step of each over ``--rounds`` processes.

    python scripts/bench_train_step.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys

from _common import LENGTHS, call_seconds, head_step, publish, results_path

from layerfuse.training.runtime import resolve_precision


def einsum_forward(self, hidden, mask):
    """DWAtt as it was: token-major einsums, norms and element-wise work under plain autocast."""
    import torch
    import torch.nn.functional as F

    def layer_norm(x, weight, bias):
        return F.layer_norm(x, x.shape[-1:]) * weight + bias

    top = hidden[:, :, -1]
    keys = self.key(self.k_pos.to(hidden.dtype))
    query = 1 + F.elu(top + self.query_mlp(top))
    weights = torch.softmax(torch.einsum("btd,ld->btl", query, keys), dim=-1)
    u = F.gelu(torch.einsum("btld,ldm->btlm", hidden, self.v_up_weight) + self.v_up_bias)
    u = layer_norm(u, self.v_mid_norm_weight, self.v_mid_norm_bias)
    v = torch.einsum("btlm,lmd->btld", u, self.v_down_weight) + self.v_down_bias
    v = layer_norm(v, self.v_norm_weight, self.v_norm_bias)
    return top + torch.einsum("btl,btld->btd", weights, v)


def einsum_dwatt():
    """DWAtt with the earlier forward: a subclass, so the library's module stays as it is."""
    from layerfuse.fusions import DWAtt

    return type("EinsumDWAtt", (DWAtt,), {"forward": einsum_forward})


def worker(fusion: str, variant: str, steps: int, precision: str) -> dict:
    import numpy as np
    import torch

    from layerfuse.training.memory import keep_freed_memory

    keep_freed_memory()
    torch.set_num_threads(1)
    # the packed batch of LENGTHS, as bench_roofline.py times it
    step = head_step(fusion, precision, fusion_class=einsum_dwatt() if variant == "einsum" else None)
    for _ in range(10):
        step()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    times = call_seconds(step, steps)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps
    return {"ms": 1e3 * float(np.median(times)), "faults": faults}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    ap.add_argument("--table", default=results_path("bench_train_step"), help="markdown file written ('' = print only)")
    ap.add_argument("--worker", nargs=2, metavar=("FUSION", "VARIANT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    precision = resolve_precision(args.precision, "cpu")
    if args.worker:
        print(json.dumps(worker(*args.worker, args.steps, precision)))
        return

    variants = [("dwatt", "kept"), ("dwatt", "returned"), ("dwatt", "einsum"),
                ("concat", "kept"), ("concat", "returned"), ("extra", "kept"), ("extra", "returned")]
    runs: dict[tuple[str, str], list[dict]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for fusion, variant in variants:
            env = {**os.environ, "LAYERFUSE_KEEP_HEAP": "0" if variant == "returned" else "1"}
            out = subprocess.run([sys.executable, __file__, "--worker", fusion, variant, "--steps", str(args.steps),
                                  "--precision", precision], env=env, capture_output=True, text=True, check=True)
            runs[fusion, variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
    lines = [f"one training step, {sum(LENGTHS)} words packed, {precision}, one thread; "
             f"median over {args.rounds} processes x {args.steps} steps", "",
             "| head | variant | ms per step | page faults per step |", "|---|---|---:|---:|"]
    for (fusion, variant), results in runs.items():
        ms = statistics.median(r["ms"] for r in results)
        faults = statistics.median(r["faults"] for r in results)
        lines.append(f"| {fusion} | {variant} | {ms:.1f} | {faults:,.0f} |")
    text = "\n".join(lines)
    publish(args.table, text, title="One training step per head: freed memory kept or returned",
            script="bench_train_step", argv=None)


if __name__ == "__main__":
    main()
