"""The learning-rate sweep behind layerfuse's FE defaults: CoNLL-2003, all-MiniLM-L6-v2, every
fusion (DWAtt with the paper's unscaled score and with the scaled one), N = 8, 32, 128, epoch caps
10 and 25, 3 seeds, five learning rates. Prints, per fusion, N and epoch cap, the best dev F1 at
each rate (mean over seeds), the rate chosen on dev and the test F1 there, then the rate that is
best on average over all cells: the default `train-head` and `sweep` use. The table goes to
--table (docs/results/lr_sweep_conll.md).

    python scripts/lr_sweep_conll.py                        # 540 runs, ~35 min on 2 cores (bf16)
    python scripts/lr_sweep_conll.py --shots 8 --seeds 1    # a quick look

Same runs, same ids as `layerfuse sweep --fusions base,concat,dwatt,extra,scalarmix --shots 8,32,128
--epochs 10,25 --trials 3 --lrs 5e-5,3e-4,1e-3,3e-3,1e-2 --layer-scores paper,scaled
--dev-sentences 1000 --precision bf16 --out runs/lr_sweep`, so either reuses the other's results.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from _common import Study, args_entry, dev_line, run_conll_grid, split_list, torch_threads

STUDY = Study(
    "lr_sweep_conll", out="lr_sweep/results.jsonl", fusions="base,concat,dwatt,extra,scalarmix", epochs=25,
    shots="8,32,128", defaults=dict(workers=2),
    options=(("--epoch-caps", dict(default="10,25", help="comma-separated epoch caps")),
             ("--lrs", dict(default="5e-5,3e-4,1e-3,3e-3,1e-2", help="comma-separated learning rates")),
             ("--layer-scores", dict(default="paper,scaled", help="DWAtt's scores to compare")),
             ("--dev-sentences", dict(type=int, default=1000, help="fixed random dev subset (0 = all of dev)")),
             ("--precision", dict(default="bf16", help="fp32, bf16 or auto"))))


def table(records: list[dict], lrs: list[float]) -> str:
    """Markdown: mean best dev F1 per learning rate (the chosen one in bold), test F1 at the chosen."""
    from layerfuse.experiments.report import best_lr, by_cell, lr_of

    lines = ["| fusion | N | epochs | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | chosen | test F1 at it |",
             "|---|---:|---:|" + "---:|" * (len(lrs) + 2)]
    for key, runs in sorted(by_cell(records).items()):  # by (fusion, N, epochs)
        chosen, at = best_lr(runs)
        f1s = [[100 * r["best_dev_f1"] for r in runs if lr_of(r) == lr] for lr in lrs]
        cells = [f"{statistics.mean(f):.1f}" if f else "-" for f in f1s]
        cells = [f"**{cell}**" if lr == chosen else cell for lr, cell in zip(lrs, cells)]
        tests = [100 * r["test_f1_at_best"] for r in at if r.get("test_f1_at_best") is not None]
        test = f"{statistics.mean(tests):.1f}" if tests else "-"
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + f" | {chosen:g} | {test} |")
    return "\n".join(lines)


def overall(records: list[dict]) -> str:
    """The rate with the best dev F1 averaged over every (fusion, N, epoch cap) cell, overall and
    per fusion: what the defaults are chosen from."""
    from layerfuse.experiments.report import by_cell, lr_of

    per = defaultdict(lambda: defaultdict(list))  # fusion -> lr -> cell means
    for (fusion, _, _), runs in by_cell(records).items():
        for lr in {lr_of(r) for r in runs}:
            per[fusion][lr].append(statistics.mean(100 * r["best_dev_f1"] for r in runs if lr_of(r) == lr))
    lines = []
    for fusion, by_lr in sorted(per.items()):
        ranked = sorted(by_lr, key=lambda lr: -statistics.mean(by_lr[lr]))
        lines.append(f"{fusion}: " + ", ".join(f"{lr:g} {statistics.mean(by_lr[lr]):.1f}" for lr in ranked))
    everything = defaultdict(list)
    for by_lr in per.values():
        for lr, means in by_lr.items():
            everything[lr] += means
    best = max(everything, key=lambda lr: statistics.mean(everything[lr]))
    return "\n".join(lines) + f"\nbest on average over all cells: lr {best:g}"


def configs(args) -> list:
    """--fusions x --shots x --epoch-caps x --seeds x --lrs x --layer-scores, as `sweep` plans them."""
    from layerfuse.experiments import grid
    from layerfuse.training import TrainConfig
    from layerfuse.training.runtime import resolve_precision

    base = TrainConfig(fusion="base", shots=None, epochs=1, seed=0, batch_size=args.batch_size,
                       eval_points=args.eval_points or None, dev_sentences=args.dev_sentences or None,
                       precision=resolve_precision(args.precision, args.device), device=args.device)
    return grid(fusions=split_list(args.fusions), shots=split_list(args.shots, int),
                epochs=split_list(args.epoch_caps, int), trials=args.seeds, base=base,
                lr=split_list(args.lrs, float), layer_score=split_list(args.layer_scores))


def main(argv: list[str] | None = None) -> str:
    args = STUDY.parse(__doc__, argv)
    with torch_threads(args.threads):
        entry = args_entry(args)
        records = run_conll_grid(args, entry, configs(args))
    model = entry.meta.get("model")
    text = (f"CoNLL-2003, {model} FE: best dev F1 x100 (mean over seeds 0..{args.seeds - 1}, "
            f"{args.dev_sentences or 'all'} dev sentences, {args.eval_points} evaluations per run)\n\n"
            + table(records, split_list(args.lrs, float)) + "\n\n" + overall(records))
    return STUDY.publish(args, argv, text, title=f"Learning-rate sweep on CoNLL-2003 ({model}, FE)", records=records,
                         dev=dev_line(args.dev_sentences, entry.split("dev").n_sentences))


if __name__ == "__main__":
    main()
