"""Times every command of README.md's worked example, as a reader types them, and writes the table.

    python scripts/time_worked_example.py            # writes docs/results/worked_example_times.md

Each command of the README's first bash block after "A worked example on the built-in data" runs in
order in bash, in a fresh folder with a fresh cache root (``LAYERFUSE_HOME``), so the first
`extract` pays for everything a new user's does. A command that exits non-zero stops the script with
one line: the example no longer runs as typed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, publish, results_path, say

SECTION = "## A worked example on the built-in data"


def commands(readme: str) -> list[tuple[str, str]]:
    """(step, command) of the example's bash block, in order; the step is the number of the comment line
    heading it (``# 2. stage two: ...`` -> ``2``)."""
    text = readme.split(SECTION, 1)[1]
    block = text.split("```bash\n", 1)[1].split("\n```", 1)[0]
    out, step = [], ""
    for line in block.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            step = stripped.lstrip("# ").split(".", 1)[0]
        elif stripped:
            out.append((step, line.partition("  #")[0].strip()))
    return out


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--readme", default=str(REPO / "README.md"))
    p.add_argument("--table", default=results_path("worked_example_times"),
                   help="markdown file the table is written to ('' = print only)")
    args = p.parse_args(argv)
    steps = commands(Path(args.readme).read_text(encoding="utf-8"))
    rows, total = [], 0.0
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ, LAYERFUSE_HOME=os.path.join(work, "cache"),
                   PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        for step, command in steps:
            say(f"$ {command}")
            t0 = time.perf_counter()
            proc = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True)
            seconds = time.perf_counter() - t0
            if proc.returncode != 0:
                sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
                raise SystemExit(f"error: `{command}` exited {proc.returncode}: the worked example does not run "
                                 f"as typed")
            total += seconds
            rows.append(f"| {step} | `{command}` | {seconds:,.1f} |")
    text = "\n".join([
        "Every command of the README's worked example, run in order as typed in a fresh folder with an empty "
        "cache root (the first `extract` included), on the built-in data (WNUT-16 through all-MiniLM-L6-v2). "
        "Wall-clock seconds, each command in its own process (Python and torch start-up included).",
        "",
        "| step | command | seconds |",
        "|---|---|---:|",
        *rows,
        f"| | all | {total:,.1f} |",
    ])
    return publish(args.table, text, title="The worked example, timed", script="time_worked_example",
                   argv=argv)


if __name__ == "__main__":
    main()
