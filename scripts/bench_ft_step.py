"""An FT training step against the backbone's forward and backward alone on the same sentences: what
fine-tuning spends beyond the backbone (the head, the word pooling, the optimizer, building the batch).

    python scripts/bench_ft_step.py --cache ENTRY --fusion concat --steps 20

One FT run (``--shots`` N, batch 16, the run's precision) is prepared as `train-head --mode ft`
prepares it; its first steps are timed one by one (after two warm-up steps), each followed by the
backbone alone, forward (every hidden state) and backward on the same sentences (tokenized before
the clock starts) with the same autocast: medians of both, measured side by side. The time to
tokenize one step's sentences, which FT no longer spends per step (a split is tokenized once), is
timed too. ``--profile``: the operators that took the most time in one FT step and in the backbone
alone (`torch.profiler`: by device time on CUDA, and by host time), side by side. Writes ``--report``
(docs/results/bench_ft_step.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import results_path, write_results


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True, help="a word-level cache entry (its backbone is loaded live)")
    p.add_argument("--fusion", default="concat")
    p.add_argument("--shots", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--report", default=None)
    p.add_argument("--project", action="store_true",
                   help="add the time of Figure 6's FT runs (N = 8..128, 50 epochs, 5 trials) at the measured step")
    p.add_argument("--profile", action="store_true", help="add the top operators of an FT step and of the backbone")
    args = p.parse_args(argv)

    import torch

    from layerfuse.cache.reader import open_entry
    from layerfuse.extract.tokenize import tokenize_words
    from layerfuse.finetune.data import live_data
    from layerfuse.finetune.live import load_live_backbone
    from layerfuse.training import TrainConfig
    from layerfuse.training.loop import prepare_run, train_step
    from layerfuse.training.runtime import autocast, now, pick_device

    device = pick_device(None)
    entry = open_entry(args.cache)
    backbone = load_live_backbone(entry.meta, device=device)
    data = live_data(entry, backbone, layers=range(1, entry.num_layers + 1))
    config = TrainConfig(fusion=args.fusion, shots=args.shots, epochs=100, seed=0, lr=5e-5, mode="ft",
                         precision=args.precision, device=str(device))
    run = prepare_run(config, data)
    run.model.train()
    orders = [order for _, order, _ in run.steps()][:args.steps + 3]
    fresh = orders.pop()  # profiled: sentences no timed step saw
    model = backbone.model

    def backbone_alone(order) -> float:
        """The backbone's forward (every hidden state) and backward on the step's sentences."""
        enc = backbone.tokenizer([run.train.words[p] for p in order], is_split_into_words=True, padding=True,
                                 truncation=True, return_tensors="pt",  # padded as FT pads (`LIVE_PAD_MULTIPLE`)
                                 pad_to_multiple_of=backbone.encoder.pad_to_multiple)
        enc = {k: v.to(device) for k, v in enc.items()}
        model.zero_grad(set_to_none=True)
        t0 = now(device)
        with autocast(args.precision, device):
            out = model(**enc, output_hidden_states=True)
        torch.stack([h.float().mean() for h in out.hidden_states]).sum().backward()
        seconds = now(device) - t0
        model.zero_grad(set_to_none=True)
        return seconds

    # Interleaved, step by step: an FT step, then the backbone alone on the same sentences, so both
    # see the same machine (a shared machine's load changes from minute to minute).
    times = []  # a step's: FT step, backbone alone, FT step again, tokenizing
    for order in orders:
        t0 = now(device)
        train_step(run, order)
        took = now(device) - t0
        other = backbone_alone(order)
        t0 = now(device)
        train_step(run, order)  # the same sentences again: every shape of the step seen before
        again = now(device) - t0
        t0 = time.perf_counter()
        tokenize_words(backbone.tokenizer, [run.train.words[p] for p in order])
        times.append((took, other, again, time.perf_counter() - t0))
    times = times[2:]  # after two warm-up steps
    step, alone, again, tok = (1000 * statistics.median(x) for x in zip(*times))
    text = "\n".join([
        f"{entry.meta.get('model')} ({entry.num_layers} layers x {entry.dim}), FT {args.fusion} at N = {args.shots}, "
        f"batch 16, {args.precision}, {len(times)} steps (medians, after two warm-up steps).", "",
        "| what | ms a step |", "|---|---:|",
        f"| an FT step (`train_step`: batch, backbone and head forward and backward, AdamW) | {step:.1f} |",
        f"| the backbone alone, forward (every hidden state) and backward, same sentences | {alone:.1f} |",
        f"| FT step / backbone alone | {step / alone:.2f}x |",
        f"| the same FT step again, right after (every shape in it seen before) | {again:.1f} |",
        f"| tokenizing one step's sentences (once per split now, not per step) | {tok:.1f} |",
    ])
    if args.profile:
        text += "\n\n" + profiles({"an FT step on new sentences": lambda: train_step(run, fresh),
                                    "the same FT step again": lambda: train_step(run, fresh),
                                    "the backbone alone": lambda: backbone_alone(fresh)}, device)
    if args.project:
        text += "\n\n" + projection(step / 1000, n_types=run.data.shot_size)
    report = args.report or results_path("bench_ft_step")
    write_results(report, text, title="An FT step against the backbone alone", script="bench_ft_step", argv=argv,
                  device=str(device))
    print(text)
    return text


def profiles(calls: dict, device, *, rows: int = 15) -> str:
    """Each of ``calls`` run once under `torch.profiler`: its top operators by self device time on
    CUDA (by self host time on a CPU), as the profiler's table."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    parts = []
    for name, call in calls.items():
        with profile(activities=activities) as prof:
            call()
            if cuda:
                torch.cuda.synchronize(device)
        # by device time on CUDA, and by host time (a step can wait on the host: kernel choice, launches)
        for sort in (["self_device_time_total"] if cuda else []) + ["self_cpu_time_total"]:
            table = prof.key_averages().table(sort_by=sort, row_limit=rows)
            by = "device" if sort.startswith("self_device") else "host"
            parts.append(f"Where {name}'s time goes, by {by} time:\n\n```\n{table}\n```")
    return "\n\n".join(parts)


def projection(step_s: float, *, n_types: int, epochs: int = 50, trials: int = 5, batch: int = 16) -> str:
    """Figure 6's FT runs (one fusion, N = 8..128, ``trials`` seeds, ``epochs`` epochs of batches of
    ``batch``) timed at ``step_s`` a step: training steps only (evaluation and start-up come on top)."""
    import math

    rows, total = [], 0.0
    for n in (8, 16, 32, 64, 128):
        steps = math.ceil(n * n_types / batch) * epochs
        seconds = steps * step_s * trials
        total += seconds
        rows.append(f"| {n} | {steps:,} | {seconds / 60:.1f} |")
    return "\n".join([f"Figure 6's FT runs at this step ({epochs} epochs, batches of {batch}, {trials} trials, "
                      "training steps only):", "", "| N | steps a run | minutes, all trials |", "|---:|---:|---:|",
                      *rows, f"| all | | {total / 60:.1f} (one fusion) |"])


if __name__ == "__main__":
    main()
