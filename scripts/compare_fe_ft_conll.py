"""FE against FT on CoNLL-2003 with all-MiniLM-L6-v2 (paper Figure 6): the same heads, the same
few-shot samples and the same dev sentences, trained on cached hidden states (FE) or on a live
backbone fine-tuned end to end with the head (FT).

Runs every fusion at each N for each seed in both modes (`train_head` resets the backbone to its
pretrained weights at the start of every FT run) into --out, runs already there skipped; then a
markdown table of best dev F1 (mean ± std over seeds) and median seconds per run, per fusion and
N, is printed and written to --table.

    python scripts/compare_fe_ft_conll.py                                 # 3 fusions x N=8,128 x 3 seeds x FE, FT
    python scripts/compare_fe_ft_conll.py --seeds 1 --shots 8 --epochs 1 --out /tmp/check.jsonl --table /tmp/check.md

FT evaluates live (a backbone forward over every dev sentence at every evaluation point), so by
default both modes evaluate on the same fixed random 1,000 sentences of dev (--dev-sentences) at
5 evenly spaced points (--eval-points).
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

from _common import (
    REPO,
    Study,
    args_entry,
    command_line,
    conll_grid,
    f1_cell,
    public_path,
    run_conll_grid,
    runs_of,
    split_list,
    torch_threads,
)

from layerfuse.training.config import default_lr

MODES = ("fe", "ft")
STUDY = Study(
    "compare_fe_ft_conll", fusions="base,concat,dwatt", epochs=10, threads=1, library_defaults=True,  # Figure 6
    options=(("--modes", dict(default="fe,ft", help="fe, ft or both")),
             ("--dev-sentences", dict(type=int, default=1000,
                                      help="evaluate on this fixed random subset of dev (0 = all of dev)")),
             ("--note", dict(default="", help="a sentence added to the table's caption (e.g. how busy the machine "
                                              "was)"))))


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


def main(argv: list[str] | None = None) -> str:
    """One grid per mode, FE first (it is quick): FE reads its samples from the cache once, FT loads the
    backbone once; then the table, written with the command that made it and where its runs are."""
    from layerfuse.experiments import load_cached, load_live
    from layerfuse.training.runtime import pick_device

    args = STUDY.parse(__doc__, argv)
    loaders = {"fe": load_cached, "ft": load_live}
    with torch_threads(args.threads):
        entry = args_entry(args)
        records = [r for mode in split_list(args.modes) for r in run_conll_grid(
            args, entry, conll_grid(args, mode=mode, dev_sentences=args.dev_sentences or None), load=loaders[mode])]
    device = records[0]["device"] if records else str(pick_device(args.device))
    # the caption names the model as given (a local folder, on the machine that ran it): shown as PATH/<name>
    text = public_path(caption(args, entry.meta.get("model"), entry.split("dev").n_sentences, device)) + "\n\n" \
        + table(records, split_list(args.fusions), split_list(args.shots, int))
    print("\n" + text)
    if args.table:
        os.makedirs(os.path.dirname(os.path.abspath(args.table)), exist_ok=True)
        command = command_line(STUDY.name, sys.argv[1:] if argv is None else argv)
        with open(args.table, "w", encoding="utf-8") as f:
            f.write(f"# FE against FT on CoNLL-2003\n\nMade by `{command}` "
                    f"(one JSON line per run in `{shown(args.out)}`).\n\n" + text + "\n")
    return text


def shown(path: str) -> str:
    """A path relative to the repository when it is inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else public_path(str(path))


if __name__ == "__main__":
    main()
