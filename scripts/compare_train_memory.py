"""Peak memory and wall time of one `train-head` run under two source trees, alternated, on the
same cache entry: what streaming evaluation changed at paper scale.

    git worktree add /tmp/before 5821c37
    python scripts/compare_train_memory.py --cache runs/rehearsal/cache/<large entry> --before /tmp/before

Each tree runs `python -m layerfuse train --cache ENTRY --fusion concat --shots 8 --epochs 1
--eval-points 1` in its own process (``cwd`` = the tree, so its `layerfuse` is imported), --repeats
times, before and after alternating; the table gives medians. Writes --report
(docs/results/compare_train_memory.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from _common import REPO, results_path, run_command, write_results


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True, help="the cache entry (the rehearsal's large one)")
    p.add_argument("--before", required=True, help="a source tree of the earlier release")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--fusion", default="concat")
    p.add_argument("--shots", default="8")
    p.add_argument("--report", default=results_path("compare_train_memory"), help="markdown file written")
    args = p.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    trees = {"before": str(Path(args.before).resolve()), "after": str(REPO)}
    figures = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(args.repeats):
            for name, tree in trees.items():
                done = run_command(["train", "--cache", args.cache, "--fusion", args.fusion, "--shots", args.shots,
                            "--epochs", "1", "--eval-points", "1", "--out", out], env, cwd=tree)
                figures[name].append((done["peak_mb"], done["seconds"]))
    lines = [f"`train-head --fusion {args.fusion} --shots {args.shots} --epochs 1 --eval-points 1` on "
             f"{os.path.basename(args.cache.rstrip('/'))}, medians of {args.repeats}:", "",
             "| source | peak RSS | wall s |", "|---|---:|---:|"]
    for name, runs in figures.items():
        lines.append(f"| {name} ({trees[name]}) | {statistics.median(m for m, _ in runs):,.0f} MB | "
                     f"{statistics.median(s for _, s in runs):.1f} |")
    text = "\n".join(lines) + "\n"
    write_results(args.report, text, title="Peak memory of `train-head`: two source trees",
                  script="compare_train_memory",
                  argv=argv)
    print(text)
    return text


if __name__ == "__main__":
    main()
