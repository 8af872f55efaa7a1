"""Every fusion trained on CUDA and on a CPU, solo and packed, seeds 0-2: do the heads learn the same?

    python scripts/compare_cuda_cpu.py --model DIR --data PATH/conll2003 --device cuda --out runs/parity/conll
    python scripts/compare_cuda_cpu.py --model DIR --data PATH/conll2003 --device cpu --out runs/parity/conll-cpu
    python scripts/compare_cuda_cpu.py --render runs/parity/conll/records.jsonl runs/parity/conll-cpu/records.jsonl \\
        --report docs/results/compare_cuda_cpu.md

A run extracts the entry (fp32 forward, float16 cache; reused when there) unless ``--cache`` names
one, then trains ``--fusions`` x ``--seeds`` at ``--shots`` N and ``--epochs``, first one run at a
time (solo), then the same runs in packs of ``--pack`` (a fusion's seeds together), and writes
every record, tagged with its device and mode, to ``--out``/records.jsonl (a rerun skips the runs
already there and writes the file anew). ``--render`` sets the
records of two devices side by side: per fusion and mode, the mean best dev F1 over the seeds and
its spread (the sample standard deviation: the trial spread), the difference of the means, and
whether it lies within the larger spread. The runs of one seed draw the same sample on both devices
(their ``sample_fingerprint``), so the difference is the device's, not the data's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _common import machine_line, say, split_list, write_results

FUSIONS = "concat,dwatt,extra,scalarmix,base"


def run(args) -> list[dict]:
    from layerfuse.experiments import grid, run_sweep
    from layerfuse.experiments.find import resolve_entry
    from layerfuse.training import TrainConfig
    from layerfuse.training.runtime import pick_device

    device = pick_device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.cache:
        entry = resolve_entry(cache=args.cache)
    else:
        entry = resolve_entry(model=args.model, dataset=args.data, cache_dir=str(out / "cache"), log=say)
    base = TrainConfig(fusion="concat", shots=args.shots, epochs=args.epochs, seed=0, lr=1e-3,
                       precision=args.precision, device=str(device))
    configs = grid(fusions=split_list(args.fusions), shots=[args.shots], epochs=[args.epochs],
                   trials=args.seeds, base=base)
    machine = machine_line(str(device))
    records = []
    for mode in split_list(args.modes):
        pack = {"solo": 1, "packed": args.pack}[mode]
        t0 = time.perf_counter()
        done = run_sweep(entry, configs, out=str(out / mode), workers=0, pack=pack, progress=False, log=say)
        say(f"{mode}: {len(done)} runs on {device} in {time.perf_counter() - t0:.1f} s")
        records += [r | {"parity": {"device": device.type, "mode": mode, "machine": machine}} for r in done.values()]
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return records


def spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def render(paths: list[str], report: str, argv: list[str] | None) -> str:
    """The records of ``paths`` (two devices) side by side, per fusion and mode."""
    cells, machines, fingerprints = {}, {}, {}
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            p = r["parity"]
            machines[p["device"]] = p["machine"]
            seeds = cells.setdefault((r["config"]["fusion"], p["mode"]), {}).setdefault(p["device"], {})
            if seeds.setdefault(r["config"]["seed"], 100 * r["best_dev_f1"]) != 100 * r["best_dev_f1"]:
                raise SystemExit(f"{path}: two different {r['config']['fusion']} {p['mode']} runs of seed "
                                 f"{r['config']['seed']} on {p['device']}")
            fingerprints.setdefault(r["config"]["seed"], set()).add(r["sample_fingerprint"])
    devices = sorted(machines, key=lambda d: d != "cuda")  # cuda first
    if len(devices) != 2:
        raise SystemExit(f"compare_cuda_cpu --render: records of two devices needed, got {devices}")
    a, b = devices
    lines = [f"| fusion | mode | {a}: dev F1 (sd) | {b}: dev F1 (sd) | {a} - {b} | per-seed largest gap | "
             "within the trial spread |", "|---|---|---:|---:|---:|---:|---|"]
    within = 0
    for (fusion, mode), by_device in sorted(cells.items()):
        xa, xb = by_device.get(a, {}), by_device.get(b, {})
        seeds = sorted(set(xa) & set(xb))
        if not seeds:
            continue
        va, vb = [xa[s] for s in seeds], [xb[s] for s in seeds]
        diff = statistics.mean(va) - statistics.mean(vb)
        gap = max(abs(xa[s] - xb[s]) for s in seeds)
        ok = abs(diff) <= max(spread(va), spread(vb))
        within += ok
        lines.append(f"| {fusion} | {mode} | {statistics.mean(va):.1f} ({spread(va):.1f}) | "
                     f"{statistics.mean(vb):.1f} ({spread(vb):.1f}) | {diff:+.1f} | {gap:.1f} | "
                     f"{'yes' if ok else 'no'} |")
    same_samples = all(len(f) == 1 for f in fingerprints.values())
    text = "\n".join([
        f"Devices: {a}: {machines[a]}; {b}: {machines[b]}.", "",
        f"Seeds {', '.join(map(str, sorted(fingerprints)))}; each seed's runs drew "
        f"{'the same sample on both devices' if same_samples else 'DIFFERENT samples (not comparable)'}. "
        "Dev F1 x100, best over the run's evaluations; sd: the sample standard deviation over the seeds; "
        "within the trial spread: the difference of the means is at most the larger sd. "
        f"{within} of {len(lines) - 2} rows within.", "", *lines])
    write_results(report, text, title="The heads on CUDA and on a CPU", script="compare_cuda_cpu", argv=argv,
                  machine=f"{a}: {machines[a]}; {b}: {machines[b]}")
    print(text)
    return text


def main(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="the encoder (default: the built-in all-MiniLM-L6-v2)")
    p.add_argument("--data", default=None, help="a dataset (default: the built-in WNUT-16)")
    p.add_argument("--cache", default=None, help="an entry extracted before (skips extraction)")
    p.add_argument("--out", default=None, help="work folder: the runs and records.jsonl")
    p.add_argument("--device", default=None)
    p.add_argument("--fusions", default=FUSIONS)
    p.add_argument("--shots", type=int, default=16)
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..S-1")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--pack", type=int, default=3, help="runs per pack in the packed pass")
    p.add_argument("--modes", default="solo,packed", help="solo (one run at a time), packed, or both")
    p.add_argument("--render", nargs="+", metavar="JSONL", default=None,
                   help="run nothing: the records.jsonl of two devices side by side, to --report")
    p.add_argument("--report", default=None)
    args = p.parse_args(argv)
    if args.render:
        if not args.report:
            p.error("--render needs --report")
        return render(args.render, args.report, argv)
    if not args.out:
        p.error("--out is required to run")
    return run(args)


if __name__ == "__main__":
    main()
