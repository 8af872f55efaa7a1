"""The `predict` page's example, run as a reader types it: one Concat head trained at N = 128 on the
CoNLL-2003 cache of all-MiniLM-L6-v2, then `layerfuse predict` on two sentences written for it
(plain and --json). Writes the commands and their output to --table (docs/results/predict_example.md),
with the dev F1 at each evaluation point from the run's record.

    python scripts/predict_example.py --data PATH/conll2003
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import CONLL, conll_entry, publish, results_path, say

SENTENCES = ("German Chancellor Angela Merkel met executives of Siemens in Paris on Tuesday, a government "
             "spokesman said.",
             "Brazilian striker Ronaldo signed a new contract with Inter Milan, the Italian club said in a "
             "statement in Rome.")
TRAINS = "it trains on CoNLL-2003, which the reader downloads"
READS = "it reads the head the first block trains"


def run(command: list[str], env: dict) -> str:
    """``command``'s stdout; a non-zero exit stops the script with one line."""
    say("$ " + " ".join(command))
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        raise SystemExit(f"error: `{' '.join(command)}` exited {proc.returncode}")
    return proc.stdout.strip("\n")


def block(why: str, shown: str, output: str) -> str:
    """A console block of ``shown`` and its ``output``, marked for the docs tests as not run, and why."""
    return f"<!-- not run by the tests: {why}; the output is this run's -->\n```console\n$ {shown}\n{output}\n```"


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=CONLL, help="CoNLL-2003 folder")
    p.add_argument("--cache", default=None, help="the MiniLM CoNLL-2003 entry (default: found or extracted)")
    p.add_argument("--shots", type=int, default=128)
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--table", default=results_path("predict_example"), help="markdown file written ('' = print only)")
    args = p.parse_args(argv)
    entry = conll_entry(args.data, cache=args.cache)
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    texts = [arg for s in SENTENCES for arg in ("--text", s)]
    quoted = " ".join(f'--text "{s}"' for s in SENTENCES)
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "predict_demo")
        train = ["--fusion", "concat", "--shots", str(args.shots), "--epochs", str(args.epochs), "--seed", "0",
                 "--eval-points", "5"]
        trained = run(["train-head", *train, "--cache", entry.path, "--out", out], env)
        name = f"concat-n{args.shots}-e{args.epochs}-s0"
        record = json.loads(Path(out, f"{name}.json").read_text(encoding="utf-8"))
        head = os.path.join(out, f"{name}.head")
        plain = run(["layerfuse", "predict", "--head", head, *texts], env)
        as_json = run(["layerfuse", "predict", "--head", head, "--json", *texts], env)
    shown_train = f"train-head {' '.join(train)} --cache CACHE/{Path(entry.path).name} --out runs/predict_demo"
    shown_out = trained.replace(out, "runs/predict_demo")
    points = ", ".join(f"{100 * e['dev_f1']:.1f}" for e in record["evals"])
    epochs = ", ".join(str(e["epoch"]) for e in record["evals"])
    text = "\n\n".join([
        block(TRAINS, shown_train, shown_out),
        f"Dev F1 at the {len(record['evals'])} evaluation points (epochs {epochs}): {points} (all "
        f"{entry.split('dev').n_sentences:,} dev sentences).",
        block(READS, f"layerfuse predict --head runs/predict_demo/{name}.head {quoted}", plain),
        block(READS, f"layerfuse predict --head runs/predict_demo/{name}.head --json {quoted}", as_json),
    ])
    return publish(args.table, text, title="`predict` on two sentences, after one Concat head",
                   script="predict_example", argv=argv)


if __name__ == "__main__":
    main()
