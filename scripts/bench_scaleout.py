"""Scale-out, measured side by side on this machine: extraction words/s with 1 process vs
`torchrun --nproc-per-node 2` (gloo), and the wall time of one small sweep run locally vs on Ray.

    python scripts/bench_scaleout.py --data PATH/conll2003 --sentences 2000

Both extractions write a fresh cache root; both sweeps use the MiniLM CoNLL-2003 cache (found or
extracted as `extract --model all-MiniLM-L6-v2 --dataset DATA` would). The figures go to --table
(docs/results/bench_scaleout.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import CONLL, REPO, conll_entry, results_path, write_results, write_subset


def timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=CONLL)
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--grid", default="--fusions concat,dwatt --shots 8,16 --epochs 10 --trials 2 --eval-points 2 "
                                      "--dev-sentences 500")
    ap.add_argument("--table", default=results_path("bench_scaleout"), help="markdown file written ('' = print only)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_scaleout_"))
    words = write_subset(args.data, args.sentences, tmp / "data")
    n_words = sum(len(w) for w in words)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    extract = [sys.executable, "-m", "layerfuse.cli.extract", "--dataset", str(tmp / "data"), "--quiet"]
    one = timed(extract + ["--cache-dir", str(tmp / "one")], env)
    two = timed([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
                 "layerfuse.cli.extract", "--dataset", str(tmp / "data"), "--quiet", "--cache-dir", str(tmp / "two")],
                {**env, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // 2))})
    lines = [f"extraction of {args.sentences} sentences ({n_words} words), whole command incl. start-up:",
             f"  1 process : {one:6.1f} s  {n_words / one:8,.0f} words/s",
             f"  2 processes (torchrun, gloo): {two:6.1f} s  {n_words / two:8,.0f} words/s  -> {one / two:.2f}x"]

    entry = conll_entry(args.data, log=lambda m: None)
    sweep = [sys.executable, "-m", "layerfuse.cli.sweep", "--cache", entry.path, *args.grid.split()]
    local = timed(sweep + ["--out", str(tmp / "local"), "--workers", "2"], env)
    ray = timed(sweep + ["--out", str(tmp / "ray"), "--ray"], env)
    same = (tmp / "local" / "report.md").read_text().split("seconds")[0] == \
        (tmp / "ray" / "report.md").read_text().split("seconds")[0]
    lines += [f"sweep ({args.grid}), whole command incl. start-up:",
              f"  local, 2 worker processes: {local:6.1f} s",
              f"  Ray (local, 2 CPUs):       {ray:6.1f} s  -> {local / ray:.2f}x; same table: {same}"]
    shutil.rmtree(tmp, ignore_errors=True)
    text = "\n".join(lines)
    print(text)
    if args.table:
        write_results(args.table, "```\n" + text + "\n```", title="Scale-out: torchrun extraction, sweep on Ray",
                      script="bench_scaleout", argv=None)


if __name__ == "__main__":
    main()
