"""The same runs trained by two versions of the code, seed by seed: what a change to the data path
moved in the numbers, against the spread of the trials.

    python scripts/compare_code_versions.py --cache ENTRY --before 98164d1 --fusions concat,dwatt,extra,scalarmix \
        --shots 8 --seeds 5 --precision bf16

Each version (the commit ``--before``, checked out into a temporary worktree, and the working tree)
trains every run in a process of its own, one version after the other, from the same entry. Writes
``--report`` (docs/results/compare_code_versions.md) and the runs as JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

FIELDS = ("best_dev_f1", "test_f1_at_best")


def train(cache: str, configs: list[dict]) -> list[dict]:
    """Each config's dev and test F1, trained by the layerfuse importable here."""
    from layerfuse.cache.reader import open_entry
    from layerfuse.training import TrainConfig, load_data, train_head

    entry = open_entry(cache)
    data = load_data(entry)
    out = []
    for fields in configs:
        result = train_head(TrainConfig(**fields), data, keep_tagger=False)
        out.append({**fields, **{f: getattr(result, f) for f in FIELDS}})
    return out


def run_child(code: Path, cache: str, configs: list[dict]) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(code))
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", "--cache", cache,
                           "--configs", json.dumps(configs)], env=env, cwd=code, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"training with {code} failed ({done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(before: list[dict], after: list[dict], fusions: list[str]) -> str:
    lines = ["| fusion | dev F1 before | dev F1 after | dev: largest change of a seed | test F1 before | "
             "test F1 after | test: largest change of a seed |", "|---|---:|---:|---:|---:|---:|---:|"]

    def cell(values):
        return f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f}"

    for fusion in fusions:
        b = [r for r in before if r["fusion"] == fusion]
        a = [r for r in after if r["fusion"] == fusion]
        row = [fusion]
        for field in FIELDS:
            vb, va = [r[field] for r in b], [r[field] for r in a]
            row += [cell(vb), cell(va), f"{100 * max(abs(x - y) for x, y in zip(vb, va)):.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str | None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True)
    p.add_argument("--before", default=None, help="the commit to compare the working tree with")
    p.add_argument("--fusions", default="concat,dwatt,extra,scalarmix")
    p.add_argument("--shots", type=int, default=8)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    p.add_argument("--report", default=None)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--configs", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(train(args.cache, json.loads(args.configs))))
        return None
    from _common import REPO, results_path, say, write_results

    fusions = args.fusions.split(",")
    configs = [dict(fusion=f, shots=args.shots, epochs=args.epochs, seed=s, lr=1e-3, precision=args.precision)
               for f in fusions for s in range(args.seeds)]
    with tempfile.TemporaryDirectory() as tmp:
        ref = args.before or "HEAD"
        old = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(old), ref], check=True,
                       capture_output=True)
        try:
            say(f"training with {ref}")
            before = run_child(old, args.cache, configs)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], check=False)
    say("training with the working tree")
    after = run_child(REPO, args.cache, configs)
    text = "\n".join([
        f"Runs: {', '.join(fusions)} at N = {args.shots}, seeds 0..{args.seeds - 1}, {args.epochs} epochs, lr "
        f"0.001, {args.precision}; before: `{ref}`, after: the working tree. Mean ± standard deviation "
        f"over the seeds, and the largest change of one seed's F1 between the two versions (points).", "",
        table(before, after, fusions)])
    report = args.report or results_path("compare_code_versions")
    write_results(report, text, title="The same runs before and after a change to the data path",
                  script="compare_code_versions", argv=argv)
    Path(report).with_suffix(".json").write_text(json.dumps({"before": before, "after": after}, indent=1))
    print(Path(report).read_text())
    return text


if __name__ == "__main__":
    main()
