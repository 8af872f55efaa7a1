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

import sys
from pathlib import Path

from _common import (
    Study,
    args_entry,
    command_line,
    conll_grid,
    pair_table,
    public_path,
    run_conll_grid,
    split_list,
    torch_threads,
)

from layerfuse.training.config import default_lr

STUDY = Study(
    "compare_fe_ft_conll", fusions="base,concat,dwatt", epochs=10, threads=1, library_defaults=True,  # Figure 6
    options=(("--modes", dict(default="fe,ft", help="fe, ft or both")),
             ("--dev-sentences", dict(type=int, default=1000,
                                      help="evaluate on this fixed random subset of dev (0 = all of dev)")),
             ("--note", dict(default="", help="a sentence added to the table's caption (e.g. how busy the machine "
                                              "was)"))))


def caption(args, model: str | None, n_dev: int, device: str) -> str:
    dev = (f"a fixed random subset of {args.dev_sentences:,} of the {n_dev:,} dev sentences (the same for every "
           f"run, to keep FT's live evaluation affordable on CPU)"
           if args.dev_sentences and args.dev_sentences < n_dev else f"all {n_dev:,} dev sentences")
    threads = f"{args.threads} torch thread{'s' * (args.threads != 1)}" if args.threads else "torch's default threads"
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
        by_mode = {mode.upper(): run_conll_grid(args, entry, conll_grid(
            args, mode=mode, dev_sentences=args.dev_sentences or None), load=loaders[mode])
            for mode in split_list(args.modes)}
    device = next((r["device"] for runs in by_mode.values() for r in runs), None) or str(pick_device(args.device))
    # the caption names the model as given (a local folder, on the machine that ran it): shown as PATH/<name>
    text = public_path(caption(args, entry.meta.get("model"), entry.split("dev").n_sentences, device)) + "\n\n" \
        + pair_table(by_mode, "FE", "FT", split_list(args.fusions), split_list(args.shots, int), more=(
            ("FE params (head)", lambda fe, ft: f"{fe[0]['params']:,}" if fe else "-"),
            ("FT params (head + backbone)",
             lambda fe, ft: f"{ft[0]['params']:,} + {ft[0]['backbone_params']:,}" if ft else "-")))
    print("\n" + text)
    if args.table:  # the runs' file relative to the repository when inside it
        command = command_line(STUDY.name, sys.argv[1:] if argv is None else argv)
        Path(args.table).parent.mkdir(parents=True, exist_ok=True)
        Path(args.table).write_text(f"# FE against FT on CoNLL-2003\n\nMade by `{command}` (one JSON line per run "
                                    f"in `{public_path(str(Path(args.out).resolve()))}`).\n\n" + text + "\n",
                                    encoding="utf-8")
    return text


if __name__ == "__main__":
    main()
