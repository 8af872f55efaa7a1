"""Where a pack step's time goes: one Figure-3 cell's heads (4 epoch caps x 5 trials) stepped
together at roberta-large shape, timed whole and phase by phase, and profiled operator by operator.

    python scripts/profile_pack_step.py                      # on CUDA: concat, dwatt, extra
    python scripts/profile_pack_step.py --shape minilm --device cpu --steps 3 --report ''
    python scripts/profile_pack_step.py --data PATH/conll2003   # each head 16 random train sentences

Each head gets its own random batch of the CoNLL-like sentence lengths (`_common.LENGTHS`, 224
words; with ``--data``, the lengths of 16 train sentences of CoNLL-2003 drawn for each head, as a
grid's batches come: the padded attention of the extra layers grows with the longest), in bf16,
stepped by `Pack.step_on` with `PackOptimizer` over 4 schedules (the cell's caps), the gradient
clipped per head, as `sweep` trains a cell. Per fusion: the median step (device clock) for the
cell (K = 20), the same with the weights cast inside autograd and the float32 gradients clipped
after (as before `Pack.narrow_weights`), with one schedule, without the clip, and with K = 5 and 1
(how the step scales with K); the step's phases, each closed by a device sync (zero_grad, the
weights' cast, forward and loss, backward, clip and widening, AdamW); and the operators that took
the most device time and the most host time (`torch.profiler`), with the device's busy time against
the wall: a step whose device is idle most of the wall is bound by the host (launches, Python), one
whose device is busy by the kernels.
Writes ``--report`` (docs/results/profile_pack_step_gpu.md on CUDA).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from types import SimpleNamespace
from unittest.mock import patch

from _common import LENGTHS, call_seconds, results_path, write_results

SHAPES = {"roberta-large": dict(n_layers=24, dim=1024, num_heads=16, ffn_dim=4096),
          "minilm": dict(n_layers=6, dim=384, num_heads=12, ffn_dim=1536)}
CAPS = (100, 75, 50, 25)  # the cell's epoch caps, longest first as `train_pack` orders them


def batch_lengths(data: str | None, k: int, *, seed: int = 0) -> list:
    """Each of ``k`` heads' sentence lengths: `LENGTHS`, or 16 of CoNLL-2003's train sentences at random."""
    import numpy as np

    if data is None:
        return [np.asarray(LENGTHS, dtype=np.int64)] * k
    from pathlib import Path

    from layerfuse.extract.formats.conll import read_conll

    lengths = np.array([len(words) for words, _ in read_conll(Path(data) / "eng.train")])
    rng = np.random.default_rng(seed)
    return [rng.choice(lengths, len(LENGTHS), replace=False) for _ in range(k)]


def build(fusion: str, shape: dict, *, k: int, schedules: int, device, dtype, lengths: list):
    """A pack of ``k`` heads of ``fusion`` over ``schedules`` schedules, and one stacked batch of
    each head's sentences of ``lengths``."""
    import torch

    from layerfuse.fusions import TokenTagger
    from layerfuse.training import TrainConfig
    from layerfuse.training.loop import PACK_MULTIPLE
    from layerfuse.training.packed import Pack, PackOptimizer

    taggers = []
    for seed in range(k):
        torch.manual_seed(seed)
        taggers.append(TokenTagger(fusion=fusion, n_labels=9, extra_layers=1, **shape).to(device).train())
    config = TrainConfig(fusion=fusion, shots=32, epochs=1, seed=0, lr=1e-3)
    per_schedule = -(-k // schedules)
    runs = [SimpleNamespace(config=config, head=t, total_steps=CAPS[i // per_schedule] * 10)
            for i, t in enumerate(taggers)]
    pack = Pack(taggers)
    pack.train(True)
    optimizer = PackOptimizer(pack, runs)
    lengths = lengths[:k]
    widest = max(int(ls.sum()) for ls in lengths)
    rows = widest + (-widest % PACK_MULTIPLE)
    hidden = torch.randn(k, 1, rows, shape["n_layers"], shape["dim"], device=device).to(dtype)
    mask = torch.zeros(k, 1, rows, dtype=torch.bool, device=device)
    for i, ls in enumerate(lengths):
        mask[i, :, :int(ls.sum())] = True
    labels = torch.randint(0, 9, (k, 1, rows), device=device).masked_fill(~mask, -100)
    return pack, optimizer, (hidden, mask, labels, lengths)


def stepper(pack, optimizer, batch, *, autocast, clip: float):
    k = batch[0].shape[0]
    return lambda: pack.step_on(*batch, heads=list(range(k)), optimizer=optimizer, autocast=autocast(),
                                max_grad_norm=clip)


def median_ms(step, device, *, steps: int, warmup: int = 3) -> float:
    import torch

    for _ in range(warmup):
        step()
    if device.type != "cuda":
        return statistics.median([1e3 * s for s in call_seconds(step, steps)])
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def phases(pack, optimizer, batch, *, autocast, device, steps: int) -> dict[str, float]:
    """Median ms of each phase of `Pack.step_on`, each closed by a device sync."""
    from layerfuse.fusions.stacked import compute_dtype
    from layerfuse.training.packed import clip_per_head, head_losses, widen_grads
    from layerfuse.training.runtime import now

    hidden, mask, labels, lengths = batch
    heads = list(range(hidden.shape[0]))
    out: dict[str, list[float]] = {}

    def timed(name, fn):
        t0 = now(device)
        result = fn()
        out.setdefault(name, []).append(1e3 * (now(device) - t0))
        return result

    for i in range(steps + 2):
        timed("zero_grad", optimizer.zero_grad)
        with autocast():
            narrow = timed("cast", lambda: pack.narrow_weights(heads, compute_dtype(hidden)))
            logits = timed("forward", lambda narrow=narrow: pack.logits(hidden, mask, lengths=lengths, heads=heads,
                                                                          weights=narrow))
        loss = timed("loss", lambda logits=logits: head_losses(logits, labels).sum())
        timed("backward", loss.backward)
        if narrow is not None:
            timed("clip", lambda narrow=narrow: widen_grads(pack.flat, {g: t.grad for g, t in narrow.items()}, 1.0))
        else:
            timed("clip", lambda: clip_per_head([t.grad for t in pack.flat.values() if t.grad is not None], 1.0))
        timed("adamw", lambda: optimizer.step(heads))
        if i < 2:  # warm-up
            out = {}
    return {name: statistics.median(v) for name, v in out.items()}


def profile(step, device, *, steps: int, rows: int) -> tuple[str, str, float, float]:
    """The top operators by device time and by host time over ``steps`` steps, the device's busy ms
    a step and the wall ms a step."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    step()
    with torch_profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall = 1e3 * (time.perf_counter() - t0) / steps
    averages = prof.key_averages()
    # the kernels' own time (an operator's device time is its kernels', counted once, as the table's total)
    busy = sum(e.self_device_time_total for e in averages
               if e.device_type == torch.autograd.DeviceType.CUDA) / 1e3 / steps
    by_device = averages.table(sort_by="self_device_time_total", row_limit=rows) if device.type == "cuda" else ""
    by_host = averages.table(sort_by="self_cpu_time_total", row_limit=rows)
    return by_device, by_host, busy, wall


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fusions", default="concat,dwatt,extra")
    p.add_argument("--shape", default="roberta-large", choices=sorted(SHAPES))
    p.add_argument("--k", type=int, default=20, help="heads in the cell's pack")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rows", type=int, default=12, help="operators listed per table")
    p.add_argument("--device", default=None)
    p.add_argument("--data", default=None, help="a CoNLL-2003 folder: batches of its train sentences' lengths")
    p.add_argument("--report", default=None, help="markdown file written ('' for none)")
    args = p.parse_args(argv)

    import torch

    from layerfuse.fusions import extra
    from layerfuse.training import packed
    from layerfuse.training.runtime import pick_device

    device = pick_device(args.device)
    attention = extra.ATTENTION.get(device.type, "groups")  # the library's way on this device
    default_narrow = packed.NARROW_GRADS.get(device.type, False)
    dtype = torch.bfloat16
    autocast = lambda: torch.autocast(device.type, dtype=dtype)  # noqa: E731
    shape = SHAPES[args.shape]
    lengths = batch_lengths(args.data, max(args.k, 5))  # the variants step up to 5 heads too
    table = ["| fusion | K | schedules | clip | gradients | ms a pack step (median) | ms a head step |",
             "|---|---:|---:|---|---|---:|---:|"]
    sections = []
    # The cell's step the library's way on this device, then the other way (narrow gradients widened
    # while clipped, `packed.NARROW_GRADS`, or the weights cast inside autograd and the float32
    # gradients clipped after), then the other variants the library's way.
    variants = ((args.k, len(CAPS), 1.0, default_narrow), (args.k, len(CAPS), 1.0, not default_narrow),
                (args.k, 1, 1.0, default_narrow), (args.k, len(CAPS), 0.0, default_narrow),
                (5, 1, 1.0, default_narrow), (1, 1, 1.0, default_narrow))
    for fusion in args.fusions.split(","):
        for k, schedules, clip, narrow in variants:
            pack, optimizer, batch = build(fusion, shape, k=k, schedules=schedules, device=device, dtype=dtype,
                                           lengths=lengths)
            with patch.dict(packed.NARROW_GRADS, {device.type: narrow}):  # the library's way back after
                ms = median_ms(stepper(pack, optimizer, batch, autocast=autocast, clip=clip), device,
                               steps=args.steps)
            kind = "narrow, widened" if narrow and pack.base.fusion.casts_stacked_weights else "float32"
            table.append(f"| {fusion} | {k} | {schedules} | {'yes' if clip else 'no'} | {kind} | {ms:.2f} "
                         f"| {ms / k:.3f} |")
            print(table[-1], flush=True)
            if (k, schedules, clip, narrow) == variants[0]:
                split = phases(pack, optimizer, batch, autocast=autocast, device=device, steps=args.steps)
                by_device, by_host, busy, wall = profile(
                    stepper(pack, optimizer, batch, autocast=autocast, clip=clip), device,
                    steps=min(args.steps, 10), rows=args.rows)
                sections.append(
                    f"## {fusion}, K = {k}\n\nPhases, ms (median, each closed by a device sync): "
                    + ", ".join(f"{name} {v:.2f}" for name, v in split.items())
                    + f".\n\nUnder the profiler: {wall:.2f} ms of wall a step, the device busy {busy:.2f} ms of it."
                    + (f"\n\nBy device time:\n\n```\n{by_device}\n```" if by_device else "")
                    + f"\n\nBy host time:\n\n```\n{by_host}\n```")
            del pack, optimizer, batch
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
    text = (f"{args.shape} shape ({shape['n_layers']} layers x {shape['dim']}), bf16 autocast, on {device.type}; a "
            f"pack of K heads, each its own batch of {len(LENGTHS)} sentences ("
            + (f"{sum(LENGTHS)} words" if args.data is None else
               f"CoNLL-2003 train sentences, {min(map(sum, lengths))} to {max(map(sum, lengths))} words, the "
               f"longest {max(int(ls.max()) for ls in lengths)}") + "); schedules: "
            f"the cell's epoch caps {', '.join(map(str, CAPS))} (4) or one; the extra layers' attention: "
            f"{attention}; gradients: narrow and widened while clipped, or float32 (cast inside "
            f"autograd, clipped after); the library's way on {device.type}: "
            f"{'narrow' if default_narrow else 'float32'}.\n\n" + "\n".join(table) + "\n\n"
            + "\n\n".join(sections))
    report = args.report if args.report is not None else results_path(
        "profile_pack_step_gpu" if device.type == "cuda" else "profile_pack_step")
    if report:
        write_results(report, text, title="Where a pack step's time goes", script="profile_pack_step",
                      argv=argv, device=str(device))
    print(text if device.type != "cuda" else "\n".join(table))
    return text


if __name__ == "__main__":
    main()
