"""FE against FT on CoNLL-2003 with all-MiniLM-L6-v2 (paper Figure 6): the same heads, the same
few-shot samples and the same dev sentences, trained on cached hidden states (FE) or on a live
backbone fine-tuned end to end with the head (FT).

Runs every fusion at each N for each seed in both modes through `layerfuse.experiments.run_grid`,
one grid per mode: FE reads the union of its runs' samples from the cache once (`load_cached`), FT
loads the backbone once (`load_live`; `train_head` resets it to its pretrained weights at the
start of every FT run). One JSON line per run is appended to --out and runs already there are
skipped (so an interrupted run resumes); then a markdown table of best dev F1 (mean ± std over
seeds) and median seconds per run, per fusion and N, is printed and written to --table.

    python scripts/compare_fe_ft_conll.py                                 # 3 fusions x N=8,128 x 3 seeds x FE, FT
    python scripts/compare_fe_ft_conll.py --seeds 1 --shots 8 --epochs 1 --out /tmp/check.jsonl --table /tmp/check.md

FT evaluates live (a backbone forward over every dev sentence at every evaluation point), so by
default both modes evaluate on the same fixed random 1,000 sentences of dev (--dev-sentences) at
5 evenly spaced points (--eval-points).

The cache is the one `extract --model all-MiniLM-L6-v2 --dataset <data>` makes (train, dev and test)
(extracted here first when missing); its root is --cache-dir, else $LAYERFUSE_HOME.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from _common import REPO, command_line, conll_grid, f1_cell, grid_main, public_path, runs_of, split_list

from layerfuse.training.config import default_lr

MODES = ("fe", "ft")


def _seconds(runs: list[dict]) -> str:
    return f"{statistics.median(r['seconds']['total'] for r in runs):.1f}" if runs else "-"


def table(records: list[dict], fusions: list[str], shots: list[int]) -> str:
    """Markdown: per fusion and N, best dev F1 (x100, mean ± std over seeds (runs)) in FE and FT,
    their difference, median seconds per run in each mode and the trainable parameters of each."""
    lines = ["| fusion | N | FE dev F1 | FT dev F1 | FT − FE | FE test F1 | FT test F1 | FE s/run | FT s/run "
             "| FE params (head) | FT params (head + backbone) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for fusion in fusions:
        for n in shots:
            fe, ft = (runs_of(records, fusion=fusion, shots=n, mode=m) for m in MODES)
            diff = "-"
            if fe and ft:
                gain = statistics.mean(r["best_dev_f1"] for r in ft) - statistics.mean(r["best_dev_f1"] for r in fe)
                diff = f"{100 * gain:+.1f}"
            fe_params = f"{fe[0]['params']:,}" if fe else "-"
            ft_params = f"{ft[0]['params']:,} + {ft[0]['backbone_params']:,}" if ft else "-"
            tests = f"{f1_cell(fe, 'test_f1_at_best')} | {f1_cell(ft, 'test_f1_at_best')}"
            lines.append(f"| {fusion} | {n} | {f1_cell(fe)} | {f1_cell(ft)} | {diff} | {tests} | {_seconds(fe)} "
                         f"| {_seconds(ft)} | {fe_params} | {ft_params} |")
    return "\n".join(lines)


def caption(args, model: str | None, n_dev: int, device: str) -> str:
    dev = (f"a fixed random subset of {args.dev_sentences:,} of the {n_dev:,} dev sentences (the same for every "
           f"run, to keep FT's live evaluation affordable on CPU)"
           if args.dev_sentences and args.dev_sentences < n_dev else f"all {n_dev:,} dev sentences")
    threads = "torch's default threads"
    if args.threads:
        threads = f"{args.threads} torch thread{'s' if args.threads != 1 else ''}"
    return (f"CoNLL-2003, {model}: FE (heads on cached hidden states) against FT (the backbone fine-tuned end "
            f"to end with the head, from its pretrained weights in every run), paper Figure 6. Best dev "
            f"entity F1 x100, mean ± std over seeds 0..{args.seeds - 1} (runs), on {dev}, evaluated at "
            f"{args.eval_points} evenly spaced points per run; test F1 at the best dev point. {args.epochs} epochs, "
            f"{_lrs(args)} (linear decay), DWAtt score {args.layer_score}, "
            f"batch {args.batch_size}; N-way few-shot samples of N x 4 sentences, the same sample per seed in "
            f"both modes. FT − FE: difference of the means. s/run: median wall-clock seconds per run "
            f"(training and evaluation) on {device}, {threads}." + (f" {args.note}" if args.note else ""))


def _lrs(args) -> str:
    """The learning rates of the table's runs: --lr, or each mode's default."""
    if args.lr is not None:
        return f"lr {args.lr:g}"
    fe = ", ".join(f"{f} {default_lr(f, 'fe'):g}" for f in split_list(args.fusions))
    return f"lr FE {fe}; FT {default_lr('base', 'ft'):g}"


def grids(args, entry) -> list:
    """One grid per mode, FE first (it is quick): each mode loads its own data once."""
    from layerfuse.experiments import load_cached, load_live

    loaders = {"fe": load_cached, "ft": load_live}
    return [(conll_grid(args, mode=mode, dev_sentences=args.dev_sentences or None), dict(load=loaders[mode]))
            for mode in split_list(args.modes)]


def text(run) -> str:
    from layerfuse.training.runtime import pick_device

    device = run.records[0]["device"] if run.records else str(pick_device(run.args.device))
    # the caption names the model as given (a local folder, on the machine that ran it): shown as PATH/<name>
    return public_path(caption(run.args, run.model, run.entry.split("dev").n_sentences, device)) + "\n\n" \
        + table(run.records, split_list(run.args.fusions), split_list(run.args.shots, int))


def write_table(run, text: str, argv: list[str]) -> None:
    """The table with the command that made it and where its runs are."""
    path, results = run.args.table, run.args.out
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    command = command_line("compare_fe_ft_conll", argv)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"# FE against FT on CoNLL-2003\n\nMade by `{command}` "
                f"(one JSON line per run in `{_shown(results)}`).\n\n" + text + "\n")


def _shown(path: str) -> str:
    """A path relative to the repository when it is inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else public_path(str(path))


GRID = dict(
    name="compare_fe_ft_conll", fusions="base,concat,dwatt", epochs=10, threads=1, library_defaults=True,  # Figure 6
    grids=grids, text=text, write=write_table,
    options=[("--modes", dict(default="fe,ft", help="fe, ft or both")),
             ("--dev-sentences", dict(type=int, default=1000,
                                      help="evaluate on this fixed random subset of dev (0 = all of dev)")),
             ("--note", dict(default="", help="a sentence added to the table's caption (e.g. how busy the machine "
                                              "was)"))])
main = grid_main(GRID, __doc__)

if __name__ == "__main__":
    main()
