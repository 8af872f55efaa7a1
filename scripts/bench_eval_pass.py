"""One evaluation pass of a Concat head from the activation store, against the Concat product alone
on the same rows in the run's precision, side by side in one run: what a pass spends beyond the
head's arithmetic (reads, conversion, indexing) is what a faster device cannot shrink.

    python scripts/bench_eval_pass.py --cache ENTRY --before 98164d1

Each code version (the working tree, and with ``--before REF`` that commit, checked out into a
temporary worktree) is measured in a process of its own, one after the other, on the same entry:
loading train and dev (layers 1..L), ``--repeats`` dev passes of a seeded random Concat head
(median), the product alone on the dev rows in the same batches, the process's peak RSS, and a
second `load_data` + pass in the same process with the hidden-state bytes it read from the cache.
Writes ``--report`` (docs/results/bench_eval_pass.md) and the figures as JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure(cache: str, *, repeats: int, precision: str) -> dict:
    """The figures of the layerfuse importable here (the child process's ``--code``)."""
    import resource

    import numpy as np
    import torch

    import layerfuse
    from layerfuse.cache.reader import CacheSplit, open_entry
    from layerfuse.fusions import TokenTagger
    from layerfuse.training import load_data
    from layerfuse.training.evaluation import score
    from layerfuse.training.runtime import autocast

    read = {"bytes": 0}
    original = CacheSplit._read_layer

    def counted(self, layer, rows):  # every hidden-state read of the cache goes through here
        values = original(self, layer, rows)
        read["bytes"] += values.nbytes
        return values

    CacheSplit._read_layer = counted
    device = torch.device("cpu")
    entry = open_entry(cache)
    L, d = entry.num_layers, entry.dim
    t0 = time.perf_counter()
    data = load_data(entry, train_sentences=[0])  # dev is what is measured: train is one sentence
    load_s, first_read = time.perf_counter() - t0, read["bytes"]
    torch.manual_seed(0)
    tagger = TokenTagger(fusion="concat", n_labels=len(entry.label_names), n_layers=L, dim=d, num_heads=1,
                         ffn_dim=4 * d).eval()
    cast = autocast(precision, device)
    kwargs = dict(device=device, label_names=data.label_names, batch_size=64, autocast=cast)
    passes, f1 = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        f1, _ = score(tagger, data.dev, **kwargs)
        passes.append(time.perf_counter() - t0)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the product's own copies
    # The product alone: every dev row of every evaluation batch, widened once beforehand, through
    # the head's Concat map in the run's precision (the batches are those of the pass: same shapes).
    dev = data.dev
    groups = dev.eval_groups(64)
    source = dev.hidden if hasattr(dev, "hidden") else entry.split("dev").hidden(layers=list(range(1, L + 1)))
    wide = torch.bfloat16 if precision == "bf16" else torch.float32
    x = torch.empty((int(dev.lengths.sum()), L * d), dtype=wide)  # [rows, L*d], the batches back to back
    bounds = np.cumsum([0] + [int(dev.lengths[g].sum()) for g in groups])  # each batch's rows in ``x``
    for g, lo, hi in zip(groups, bounds[:-1], bounds[1:]):
        x[lo:hi] = torch.from_numpy(source[dev.rows_of(g)]).flatten(1)
    del source
    weight = tagger.fusion.proj.weight.detach().to(wide)
    product = []
    with torch.inference_mode():
        for _ in range(repeats):
            t0 = time.perf_counter()
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                torch.nn.functional.linear(x[lo:hi], weight)
            product.append(time.perf_counter() - t0)
    del x
    # A second run in the same process: what it reads, and its pass.
    before = read["bytes"]
    t0 = time.perf_counter()
    again = load_data(entry, train_sentences=[0])
    score(tagger, again.dev, **kwargs)
    second_s = time.perf_counter() - t0
    return {"code": str(Path(layerfuse.__file__).parents[1]), "rows": int(dev.labels.size),
            "sentences": int(dev.n_sentences), "layers": L, "dim": d, "precision": precision,
            "dev_streamed": bool(getattr(dev, "streamed", False)), "load_s": load_s, "first_read_bytes": first_read,
            "pass_s": passes, "pass_median_s": statistics.median(passes), "product_s": product,
            "product_median_s": statistics.median(product), "second_run_s": second_s,
            "second_run_read_bytes": read["bytes"] - before, "peak_rss_mb": peak_mb, "dev_f1": f1}


def run_child(code: Path, args) -> dict:
    """``measure`` in a fresh process that imports layerfuse from ``code``."""
    env = dict(os.environ, PYTHONPATH=str(code))
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--cache", args.cache,
               "--repeats", str(args.repeats), "--precision", args.precision]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=code, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"measuring {code} failed ({done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: dict) -> str:
    lines = ["| code | dev held or streamed | load | pass (median) | product alone (median) | pass / product | "
             "second run: read | second run: load + pass | peak RSS |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(
            f"| {name} | {'streamed' if r['dev_streamed'] else 'held'} | {r['load_s']:.1f} s | "
            f"{r['pass_median_s']:.1f} s | {r['product_median_s']:.1f} s | "
            f"{r['pass_median_s'] / r['product_median_s']:.2f}x | {r['second_run_read_bytes'] / 1e6:,.1f} MB | "
            f"{r['second_run_s']:.1f} s | {r['peak_rss_mb'] / 1024:.1f} GiB |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str | None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True, help="a cache entry with train and dev (e.g. roberta-large shape)")
    p.add_argument("--before", default=None, help="a commit to measure beside the working tree")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    p.add_argument("--report", default=None, help="default: docs/results/bench_eval_pass.md")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.cache, repeats=args.repeats, precision=args.precision)))
        return
    from _common import MACHINE_ARG, REPO, cpu_line, public_path, results_path, say, write_results

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.before:
            before = Path(tmp) / "before"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(before), args.before],
                           check=True, capture_output=True)
            try:
                say(f"measuring {args.before}")
                results[f"before ({args.before})"] = run_child(before, args)
            finally:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)], check=False)
        say("measuring the working tree")
        results["after (this tree)"] = run_child(REPO, args)
    for r in results.values():
        r.pop("code")
    first = next(iter(results.values()))
    text = "\n".join([
        f"Dev: all {first['sentences']:,} sentences ({first['rows']:,} words), layers 1..{first['layers']} "
        f"of width {first['dim']}, a Concat head with seeded random weights, {args.precision} autocast, "
        f"{args.repeats} passes each (median). Each code version ran in its own process, one after the "
        f"other, on the same entry.", "",
        table(results), "",
        "*pass*: `score` over dev (batches built from the store, the forward pass, F1); *product alone*: the "
        "Concat map alone on the same rows in the same batches, widened beforehand; *second run*: `load_data` "
        "and one pass again in the same process, with the hidden-state bytes read from the cache.",
    ])
    report = args.report or results_path("bench_eval_pass")
    write_results(report, text, title="An evaluation pass against the head's product alone",
                  script="bench_eval_pass", argv=argv)
    command = public_path(shlex.join(sys.argv), pattern=MACHINE_ARG)
    Path(report).with_suffix(".json").write_text(json.dumps(
        {"cpu": cpu_line(), "cores": os.cpu_count(), "command": command, **results}, indent=1))
    print(Path(report).read_text())
    return text


if __name__ == "__main__":
    main()
