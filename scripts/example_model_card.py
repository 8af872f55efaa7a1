"""Writes the model card of an exported head, as `layerfuse export` writes it, for the docs to show.

    python scripts/example_model_card.py      # writes docs/results/example_model_card.md

Runs the README's worked example up to its export, offline, in a scratch folder: `extract` (all-MiniLM-L6-v2
over WNUT-16, into the cache root: `--cache-dir`, else $LAYERFUSE_HOME), `train-head --fusion concat --shots 8
--seed 0`, `layerfuse export ... --out models/concat-n8`, then copies the folder's README.md unchanged.
The card has no header of its own: the Hub reads its metadata from the first line.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

from _common import results_path, say


def run(command, args: list[str]) -> None:
    """A command line of the package, in this process; a failure stops the script with its message."""
    try:
        command.main(args, standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise
    say(" ".join(args))


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache-dir", default=None, help="cache root for the extraction (default: $LAYERFUSE_HOME)")
    p.add_argument("--out", default=results_path("example_model_card"), help="where the card is copied")
    args = p.parse_args(argv)
    from layerfuse.cli.extract import main as extract
    from layerfuse.cli.main import main as layerfuse
    from layerfuse.cli.train import main as train

    cache = ["--cache-dir", os.path.abspath(args.cache_dir)] if args.cache_dir else []
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as work:
        os.chdir(work)
        try:
            run(extract, cache)
            run(train, ["--fusion", "concat", "--shots", "8", "--seed", "0", *cache])
            run(layerfuse, ["export", "runs/concat-n8-e10-s0.json", "--out", "models/concat-n8"])
            shutil.copyfile(os.path.join(work, "models", "concat-n8", "README.md"), os.path.join(here, args.out))
        finally:
            os.chdir(here)
    say(f"wrote {args.out}")
    return args.out


if __name__ == "__main__":
    main()
