"""The GPU check: every stage of layerfuse on a CUDA device, as a user runs it, with its figures.

    python scripts/gpu_check.py                      # built-in default: MiniLM on WNUT-16
    python scripts/gpu_check.py --model DIR --dataset PATH/conll2003

In a fresh cache root: `extract` (fp32 and bf16 forward), `train-head` FE (concat, dwatt) and FT
(concat), `predict`, a 2-worker `sweep`; prints the figures and writes them as JSON (--json). A
command that fails or a run without a finite F1 makes it exit non-zero. `--device cpu` rehearses
the script itself. `--render A.json [B.json ...] --report FILE` sets earlier checks side by side.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from _common import command_line, say, write_results


def gpu_line(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SystemExit("gpu_check: CUDA is not available here (torch.cuda.is_available() is False); "
                             "pass --device cpu to rehearse the script on the CPU")
        props = torch.cuda.get_device_properties(0)
        return (f"gpu: {props.name}, {props.total_memory / 2**30:.0f} GiB, capability {props.major}.{props.minor}; "
                f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    return f"no GPU used (device {device}); torch {torch.__version__}"


def run(cmd: list[str], env: dict) -> tuple[str, float]:
    """One command as a user types it; its stdout and wall seconds. A failure stops the check."""
    say("$ " + " ".join(cmd))
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"gpu_check: `{' '.join(cmd)}` exited {done.returncode}")
    return done.stdout, seconds


def newest_record(out: str) -> dict:
    path = max(glob.glob(os.path.join(out, "*.json")), key=os.path.getmtime)
    with open(path, encoding="utf-8") as f:
        return json.load(f) | {"json": path}


def step_figures(record: dict) -> dict:
    seconds, steps = record["seconds"], max(record["total_steps"], 1)
    f1 = record["best_dev_f1"]
    if not (f1 == f1 and 0.0 <= f1 <= 1.0):  # NaN or out of range: the run is wrong, not slow
        raise SystemExit(f"gpu_check: {record['json']}: best dev F1 is {f1}")
    return {"best_dev_f1": round(f1, 4), "params": record["params"], "steps": steps,
            "ms_per_step": round(1000 * seconds["train"] / steps, 2), "eval_s": round(seconds["eval"], 2),
            "device": record["device"]}


def render(paths: list[str]) -> str:
    """Markdown of the --json files of earlier checks: one column per check."""
    checks = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            checks.append(json.load(f))
    rows = [("device", lambda c: c["device"]),
            ("command", lambda c: f"`{c.get('command', '?')}`"),
            *[(f"extract {p}: wall s", lambda c, p=p: c["extract"][p]["wall_s"]) for p in ("fp32", "bf16")],
            *[(f"extract {p}: train words/s", lambda c, p=p: _words_per_s(c["extract"][p]["report"], "train"))
              for p in ("fp32", "bf16")],
            *[(f"{name}: {what}", lambda c, name=name, what=what: c["train"][name][what])
              for name in ("fe concat", "fe dwatt", "ft concat") for what in ("ms_per_step", "eval_s", "best_dev_f1")],
            ("predict: wall s", lambda c: c["predict"]["wall_s"]),
            ("sweep (2 workers, 4 runs): wall s", lambda c: c["sweep"]["wall_s"])]
    lines = ["| | " + " | ".join(os.path.basename(p) for p in paths) + " |", "|---" * (len(paths) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(str(get(c)) for c in checks) + " |" for label, get in rows]
    return "\n".join(lines)


def machines(paths: list[str]) -> str:
    """Every device the checks of ``paths`` ran on, each with the columns (files) it made, in order."""
    columns: dict[str, list[str]] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            columns.setdefault(json.load(f)["device"], []).append(os.path.basename(path))
    if len(columns) == 1:
        return next(iter(columns))
    return "; ".join(f"{device} ({', '.join(names)})" for device, names in columns.items())


def _words_per_s(report: list[str], split: str) -> str:
    line = next((text for text in report if text.split()[:1] == [split]), "")
    found = re.search(r"([\d,]+) words/s", line)
    return found.group(1) if found else "-"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="backbone (default: the built-in all-MiniLM-L6-v2)")
    p.add_argument("--dataset", default=None, help="dataset (default: the built-in WNUT-16)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--json", default=None, help="write the figures here too")
    p.add_argument("--render", nargs="+", default=None, help="--json files of earlier checks: write --report")
    p.add_argument("--report", default=None, help="with --render: the markdown file")
    p.add_argument("--note", default="", help="with --render: a paragraph above the table (what the checks ran on)")
    args = p.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    if args.render:
        text = (args.note + "\n\n" if args.note else "") + render(args.render)
        if args.report:
            write_results(args.report, text, title="The GPU check", script="gpu_check", argv=argv,
                          machine=machines(args.render))
        print(text)
        return {}
    figures = {"device": gpu_line(args.device), "command": command_line("gpu_check", argv)}
    say(figures["device"])
    source = [*(["--model", args.model] if args.model else []), *(["--dataset", args.dataset] if args.dataset else [])]
    with tempfile.TemporaryDirectory() as root:
        env = dict(os.environ, LAYERFUSE_HOME=os.path.join(root, "cache"))
        device = ["--device", args.device]
        figures["extract"] = {}
        for precision in ("fp32", "bf16"):
            text, seconds = run(["extract", *source, *device, "--precision", precision, "--quiet"], env)
            figures["extract"][precision] = {"wall_s": round(seconds, 1), "report": text.strip().splitlines()}
        common = [*source, *device, "--shots", "8", "--epochs", "3"]
        figures["train"] = {}
        for name, extra in (("fe concat", ["--fusion", "concat"]), ("fe dwatt", ["--fusion", "dwatt"]),
                            ("ft concat", ["--fusion", "concat", "--mode", "ft"])):
            out = os.path.join(root, name.replace(" ", "-"))
            run(["train-head", *common, *extra, "--out", out], env)
            figures["train"][name] = step_figures(newest_record(out))
        # a record names its checkpoint relative to the run's folder
        head = os.path.join(root, "fe-concat", newest_record(os.path.join(root, "fe-concat"))["checkpoint"])
        text, seconds = run(["layerfuse", "predict", "--head", head, *device,
                             "--text", "John Smith flew to Paris with Lufthansa ."], env)
        figures["predict"] = {"wall_s": round(seconds, 1), "output": text.strip().splitlines()}
        text, seconds = run(["layerfuse", "sweep", *source, "--fusions", "concat,scalarmix", "--shots", "8",
                             "--epochs", "3", "--trials", "2", "--workers", "2",
                             "--out", os.path.join(root, "sweep")], env)
        figures["sweep"] = {"workers": 2, "runs": 4, "wall_s": round(seconds, 1)}
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=2)
    return figures


if __name__ == "__main__":
    main()
