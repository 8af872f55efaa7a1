"""Xie et al.'s rule against as many top layers, and the deeper baseline on the best single layer:
Base and the extra layers (R+n) on the MiniLM cache of CoNLL-2003, each on the backbone's top layer
and on the layer `--layers xie` picks (the lowest-nu layer of the run's own sample, the layers above
it dropped), N = 8 to 128, 50 epochs, dev F1 after every epoch on the whole dev split, paired by seed.

    python scripts/compare_xie_conll.py --data PATH/conll2003 [--cache PATH/entry]

On the top layer only the fusions of --top run here; the others' top-layer runs are the paired
grid's (--grid, the same samples). The table: xie − top per head and N; the paired grid's fusion
heads against R+n and Base on the pick; the pick per N and seed against the whole train split's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from _common import (
    Study,
    args_entry,
    by_cell,
    conll_grid,
    copy_records,
    head_cells,
    paired_cells,
    public_path,
    read_records,
    results_path,
    run_conll_grid,
    split_list,
    torch_threads,
)

XIE = "xie"  # the --layers spec of Xie's rule with the classifier's layer alone (K = 1)
FUSION_HEADS = ("concat", "dwatt")  # the paired grid's fusion heads, set against R+n on the picked layer
STUDY = Study(
    "compare_xie_conll", fusions="base,extra", epochs=50, threads=1, library_defaults=True,
    shots="8,16,32,64,128", seeds=5, defaults=dict(eval_points=0, workers=2),
    options=(("--grid", dict(default=results_path("paired_grid_conll", ".jsonl"),
                             help="the paired grid's per-run records (scripts/paired_grid_conll.py), "
                                  "whose fusion heads are set against R+n ('' = none)")),
             ("--top", dict(default="base", help="the fusions that also run on the top layer here (the others' "
                                                "top-layer runs are --grid's, on the same samples)")),
             ("--records", dict(default=results_path("compare_xie_conll", ".jsonl"),
                                help="the runs' records are copied here ('' = not copied)"))))


def head_of(record: dict) -> str:
    """'base' or 'extra' on the top layer, or '<fusion> (xie)' on the picked one."""
    c = record["config"]
    return f"{c['fusion']} ({XIE})" if c.get("layers") == XIE else c["fusion"]


def pair_row(n: int, a: str, b: str, cells: dict, *, note: str = "") -> str | None:
    row = paired_cells(cells.get((a, n), {}), cells.get((b, n), {}), above=False)
    return row and f"| {n} | {a} − {b}{note} | {row} |"


PAIR_HEADER = ["| N | difference | dev F1, paired: mean ± 95% CI (seeds) | 95% CI against 0 | per seed (dev) "
               "| test F1 at best, paired | test: 95% CI against 0 |", "|---:|---|---:|---|---|---:|---|"]


def xie_table(cells: dict, grid: dict, fusions: list[str], shots: list[int]) -> str:
    """Each fusion on Xie's pick against the top layer: its top-layer runs here, else the paired grid's
    (the same samples; a precision that differs is named)."""
    rows = []
    for f in fusions:
        both = {**{k: v for k, v in grid.items() if k[0] == f}, **cells}
        precision = {k: next(iter(v.values()))["config"]["precision"] for k, v in both.items()}
        for n in shots:
            a, b = precision.get((f"{f} ({XIE})", n)), precision.get((f, n))
            note = f" ({a} against the paired grid's {b})" if (f, n) not in cells and b else ""
            rows.append(pair_row(n, f"{f} ({XIE})", f, both, note=note))
    return "\n".join(PAIR_HEADER + [r for r in rows if r])


GRID_EXTRA = "extra, paired grid"  # the paired grid's own R+n on the top layer: the same runs, its precision


def grid_table(cells: dict, grid: dict, checks: dict, shots: list[int]) -> tuple[str, bool]:
    """(the paired grid's fusion heads against Base and R+n on the picked layer, paired by seed; whether
    its first rows set R+n on the top layer here (``checks``) against the grid's, which differ in
    precision alone)."""
    both = {**cells, **checks, **{k: v for k, v in grid.items() if k[0] in FUSION_HEADS},
            **{(GRID_EXTRA, n): v for (head, n), v in grid.items() if head == "extra"}}
    precision = {k[0]: next(iter(v.values()))["config"]["precision"] for k, v in both.items()}

    def row(n, a, b):
        mixed = precision.get(a) != precision.get(b)
        return pair_row(n, a, b, both, note=f" ({precision.get(a)} against {precision.get(b)})" if mixed else "")

    same_head = [r for r in (row(n, "extra", GRID_EXTRA) for n in shots) if r]
    rows = [row(n, fusion, f"{head} ({XIE})") for n in shots for fusion in FUSION_HEADS for head in ("extra", "base")]
    return "\n".join(PAIR_HEADER + same_head + [r for r in rows if r]), bool(same_head)


def heads_table(cells: dict, heads: list[str], shots: list[int]) -> str:
    lines = ["| head | N | best dev F1: mean ± 95% CI (seeds) | test F1 at best | layer (per seed) | s/run |",
             "|---|---:|---:|---:|---|---:|"]
    for head in heads:
        for n in shots:
            if runs := [r for _, r in sorted(cells.get((head, n), {}).items())]:
                layers = " / ".join(",".join(map(str, r["layers"])) for r in runs)
                seconds = sum(r["seconds"]["total"] for r in runs) / len(runs)
                lines.append(f"| {head} | {n} | {head_cells(runs)} | {layers} | {seconds:.0f} |")
    return "\n".join(lines)


def picks_table(cells: dict, shots: list[int], whole: list[tuple[int, float]]) -> str:
    """The xie pick per N and seed (each run's own sample), against the pick on the whole train split."""
    from layerfuse.layers import pick_layers

    (best_whole,) = pick_layers(whole, 1)  # the rule's own pick, ties to the lower layer
    seeds = sorted({s for (head, _), runs in cells.items() if head.endswith(f"({XIE})") for s in runs})
    lines = ["| N | " + " | ".join(f"seed {s}" for s in seeds) + " | most frequent | seeds on the whole-split pick |",
             "|---:|" + "---:|" * len(seeds) + "---:|---:|"]
    for n in shots:
        picks = {}
        for head in (f"{f} ({XIE})" for f in ("base", "extra")):
            for seed, r in cells.get((head, n), {}).items():
                picks.setdefault(seed, r["layers"][-1])
                assert picks[seed] == r["layers"][-1], "one sample, one pick"  # both heads rank the same sample
        if not picks:
            continue
        common, count = Counter(picks.values()).most_common(1)[0]
        lines.append(f"| {n} | " + " | ".join(str(picks.get(s, "-")) for s in seeds)
                     + f" | {common} ({count} of {len(picks)}) | {sum(p == best_whole for p in picks.values())} "
                       f"of {len(picks)} |")
    nu = ", ".join(f"{layer}: {v:.3g}" for layer, v in whole)
    return "\n".join(lines) + (f"\n\nThe whole train split picks layer {best_whole} (nu per layer, at most 2,000 "
                               f"tokens per tag, seed 0: {nu}).")


def configs(args) -> list:
    """Every fusion on Xie's pick; on the top layer those of --top (the others' top-layer runs are the
    paired grid's). Seed by seed: a grid cut short leaves whole seeds."""
    configs = [c for c in conll_grid(args, axes={"layers": [None, XIE]})
               if c.layers == XIE or c.fusion in split_list(args.top)]
    return sorted(configs, key=lambda c: (c.seed, -c.shots, c.fusion))


def precision_checks(args) -> list[dict]:
    """R+n on the top layer in --out beyond the planned runs (a rerun with --top base,extra on a few N
    and seeds): the paired grid's runs again under this machine's precision."""
    from layerfuse.experiments import read_results

    return [r for r in read_results(args.out).values()
            if r["config"]["fusion"] == "extra" and r["config"].get("layers") is None
            and "extra" not in split_list(args.top)]


def report(args, entry, records: list[dict], planned: int) -> str:
    from layerfuse.layers.scores import score_layers

    fusions, shots = split_list(args.fusions), sorted(split_list(args.shots, int))
    cells = by_cell(records, head_of)
    # the grid's DWAtt with the paper's score is a head of its own, kept apart from (scaled) DWAtt
    grid = by_cell(read_records(args.grid)) if args.grid and Path(args.grid).exists() else {}
    fused, same_head = grid_table(cells, grid, by_cell(precision_checks(args), head_of), shots)
    heads = [h for f in fusions for h in (f, f"{f} ({XIE})")]
    whole = score_layers(entry.split("train"), layers=range(1, entry.num_layers + 1))
    precisions = sorted({r["config"]["precision"] for r in records})
    lrs = sorted({f"{r['config']['fusion']} {r['config']['lr']:g}" for r in records})
    seeds = sorted({r["config"]["seed"] for r in records})
    done = "" if len(records) == planned else f" **{len(records)} of the {planned} planned runs finished.**"
    return (f"CoNLL-2003, {entry.meta.get('model')} FE from the cache, {args.epochs} epochs, dev F1 after every "
            f"epoch on the whole dev split, the test F1 of each run's head at its best dev point; batch "
            f"{args.batch_size}; learning rates {', '.join(lrs)} (layerfuse's defaults); precision "
            f"{', '.join(precisions)}; seeds {', '.join(map(str, seeds))} ({len(records)} runs).{done} F1 x100. "
            f"'{XIE}': `--layers {XIE}`, the head on the lowest-nu layer of 1..{entry.num_layers} on the run's own "
            f"sample (Xie et al.'s classifier layer; the layers above it unused); without it the head reads the "
            f"top layer {entry.num_layers}, as many top layers (one). Each interval is the 95% CI of the mean "
            f"(Student t, n − 1 degrees of freedom). Per-run records: `{public_path(args.records or args.out)}`."
            "\n\nXie's pick against the top layer, paired by seed (a − b):\n\n" + xie_table(cells, grid, fusions, shots)
            + "\n\nThe fusion heads of the paired grid (`" + public_path(args.grid) + "`, the same samples) "
            "against R+n and Base on the picked layer, paired by seed (a − b); where the two ran under different "
            "precisions the row says so" + (", and the first rows measure that difference alone (the same head "
                                             "and samples under the two precisions)" if same_head else "")
            + ":\n\n" + fused
            + "\n\nEach head (unpaired), with the layer it read, seed by seed:\n\n" + heads_table(cells, heads, shots)
            + "\n\nThe picked layer per N and seed (the training sample of that seed; N sentences per entity "
            "type):\n\n" + picks_table(cells, shots, whole))


def main(argv: list[str] | None = None) -> str:
    args = STUDY.parse(__doc__, argv)
    with torch_threads(args.threads):
        entry, planned = args_entry(args), configs(args)
        records = run_conll_grid(args, entry, planned)
    if args.records:
        copy_records(records + precision_checks(args), args.records, head=head_of)
    return STUDY.publish(args, argv, report(args, entry, records, len(planned)), records=records, entry=entry,
                         title=f"Xie et al.'s rule against the top layer, and R+n on the best layer "
                               f"({entry.meta.get('model')}, CoNLL-2003)")


if __name__ == "__main__":
    main()
