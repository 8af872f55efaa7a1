"""Figures 2-4 of the paper as paired per-seed differences: DWAtt, Concat and the extra layers on the
MiniLM cache of CoNLL-2003, N = 8 to 128, at the 50-epoch cap, evaluated on the whole dev split after
every epoch (the paper's Figure 4 setting), with the test F1 at each run's best dev point.

    python scripts/paired_grid_conll.py --data PATH/conll2003 [--cache PATH/entry]

Runs the grid seed by seed into --out, copies its records to --records and writes per head and N
the mean ± 95% CI of dev and test F1, per N the paired differences seed by seed (the heads of one
seed train on the same sample) with their 95% CIs, and the mean dev F1 after selected epochs.
--paper-score-lr adds DWAtt with the paper's unscaled score at its own rate, on the same samples.
"""

from __future__ import annotations

import statistics

from _common import (
    PAPER_SCORE,
    Study,
    args_entry,
    by_cell,
    conll_grid,
    copy_records,
    epoch_cells,
    head_cells,
    paired_cells,
    paper_head,
    public_path,
    results_path,
    run_conll_grid,
    split_list,
    torch_threads,
)

PAIRS = [("dwatt", "concat"), ("dwatt", "extra"), ("concat", "extra"), (PAPER_SCORE, "dwatt"), (PAPER_SCORE, "concat")]
EPOCHS_SHOWN = (1, 2, 5, 10, 25, 50)
STUDY = Study(
    "paired_grid_conll", fusions="dwatt,concat,extra", epochs=50, threads=1, library_defaults=True,
    shots="8,16,32,64,128", seeds=5, defaults=dict(eval_points=0, workers=2),
    options=(("--precision", dict(default="auto", choices=["auto", "fp32", "bf16"],
                                  help="autocast of the heads' forward passes (auto: the faster on this machine)")),
             ("--records", dict(default=results_path("paired_grid_conll", ".jsonl"),
                                help="the grid's per-run records are copied here ('' = not copied)")),
             ("--paper-score-lr", dict(type=float, default=None,
                                       help="also run DWAtt with the paper's unscaled score at this rate (its own "
                                            "best in the learning-rate sweep: 3e-3), paired with the others")),
             ("--no-run", dict(action="store_true", help="run nothing: report the grid's runs already in --out (a "
                                                         "grid cut short says how many)"))))


def heads_table(cells: dict, fusions: list[str], shots: list[int]) -> str:
    lines = ["| head | N | best dev F1: mean ± 95% CI (seeds) | test F1 at best | best epoch: median (range) "
             "| s/run |", "|---|---:|---:|---:|---:|---:|"]
    for fusion in fusions:
        for n in shots:
            if runs := list(cells.get((fusion, n), {}).values()):
                epochs = [r["best_epoch"] for r in runs]
                lines.append(f"| {fusion} | {n} | {head_cells(runs)} "
                             f"| {statistics.median(epochs):g} ({min(epochs)}-{max(epochs)}) "
                             f"| {statistics.mean(r['seconds']['total'] for r in runs):.0f} |")
    return "\n".join(lines)


def paired_table(cells: dict, shots: list[int]) -> str:
    rows = ((n, a, b, paired_cells(cells.get((a, n), {}), cells.get((b, n), {}))) for n in shots for a, b in PAIRS)
    return "\n".join(["| N | difference | dev F1, paired: mean ± 95% CI (seeds) | 95% CI against 0 | per seed (dev) "
                      "| seeds above 0 | test F1 at best, paired | test: 95% CI against 0 |",
                      "|---:|---|---:|---|---|---:|---:|---|"]
                     + [f"| {n} | {a} − {b} | {row} |" for n, a, b, row in rows if row])


def curve_table(cells: dict, fusions: list[str], shots: list[int], epochs: int) -> str:
    shown = [e for e in EPOCHS_SHOWN if e <= epochs]
    return "\n".join(["| head | N | " + " | ".join(f"epoch {e}" for e in shown) + " |",
                      "|---|---:|" + "---:|" * len(shown)]
                     + [f"| {f} | {n} | {epoch_cells(cells[f, n].values(), shown)} |"
                        for f in fusions for n in shots if cells.get((f, n))])


def configs(args) -> list:
    """Seed by seed: a grid cut short leaves whole seeds, every head of a seed on its sample."""
    from dataclasses import replace

    from layerfuse.training.runtime import resolve_precision

    configs = conll_grid(args, precision=resolve_precision(args.precision))
    if args.paper_score_lr:
        configs += [replace(c, layer_score="paper", lr=args.paper_score_lr) for c in configs if c.fusion == "dwatt"]
    return sorted(configs, key=lambda c: (c.seed, -c.shots, c.fusion))


def already_run(configs: list, results: str) -> list[dict]:
    """The records of ``configs`` already in ``results`` (--no-run)."""
    from layerfuse.experiments import read_results, run_id

    done = read_results(results)
    return [done[run_id(c)] for c in configs if run_id(c) in done]


def main(argv: list[str] | None = None) -> str:
    args = STUDY.parse(__doc__, argv)
    with torch_threads(args.threads):
        entry, planned = args_entry(args), configs(args)
        records = already_run(planned, args.out) if args.no_run else run_conll_grid(args, entry, planned)
    if args.records:
        copy_records(records, args.records, head=lambda r: r["config"]["fusion"])
    return STUDY.publish(args, argv, report(args, entry, records, len(planned)), records=records, entry=entry,
                         title="Figures 2-4 paired by seed: DWAtt, Concat and the extra layers on CoNLL-2003 "
                               f"({entry.meta.get('model')})")


def report(args, entry, records: list[dict], planned: int) -> str:
    fusions, shots = split_list(args.fusions), sorted(split_list(args.shots, int))
    cells = by_cell(records)
    if any(head == PAPER_SCORE for head, _ in cells):
        fusions = [*fusions, PAPER_SCORE]
    lrs = sorted({f"{paper_head(r)} {r['config']['lr']:g}" for r in records})
    scores = sorted({r["config"]["layer_score"] for r in records if r["config"]["fusion"] == "dwatt"})
    precisions = sorted({r["config"]["precision"] for r in records})
    seeds = sorted({r["config"]["seed"] for r in records})
    done = "" if len(records) == planned else f" **{len(records)} of the {planned} planned runs finished.**"
    return (f"CoNLL-2003, {entry.meta.get('model')} FE from the cache, {args.epochs} epochs, dev F1 after every "
            f"epoch on the whole dev split, the test F1 of each run's head at its best dev point (whole test "
            f"split); batch {args.batch_size}; learning rates {', '.join(lrs)} (layerfuse's defaults unless "
            f"the command sets --lr); DWAtt's layer score {', '.join(scores) or '-'}; precision "
            f"{', '.join(precisions)}; seeds {', '.join(map(str, seeds))} ({len(records)} runs).{done} "
            f"F1 x100. The heads of one seed train on the same sample (checked by its fingerprint), so "
            f"the differences are paired seed by seed; each interval is the 95% CI of the mean (Student t, "
            f"n − 1 degrees of freedom). '95% CI against 0': whether the paired interval lies above 0, "
            f"below 0, or contains it ('inside'). Per-run records: `{public_path(args.records or args.out)}`.\n\n"
            "Paired per-seed differences (a − b):\n\n" + paired_table(cells, shots)
            + "\n\nEach head (unpaired):\n\n" + heads_table(cells, fusions, shots)
            + "\n\nMean dev F1 after selected epochs (Figure 4's curve), mean ± 95% CI (seeds):\n\n"
            + curve_table(cells, fusions, shots, args.epochs))


if __name__ == "__main__":
    main()
