"""Does the training-free variability score pick layers that do as well as fusing all of them?

FE heads on CoNLL-2003 with all-MiniLM-L6-v2, one run per fusion, N, seed and layer choice (all
layers, auto:K, the top K layers). Each run reads only what it needs from the cache (its train
sample with the candidate layers, dev with the fused ones), so the bytes it loads are part of the
answer: the table gives dev and test F1, the layers fused, seconds and MB loaded per run.

    LAYERFUSE_HOME=/tmp/lc python scripts/compare_layers_conll.py                # the full grid
    LAYERFUSE_HOME=/tmp/lc python scripts/compare_layers_conll.py --seeds 1 --shots 8 --out /tmp/x.jsonl
"""

from __future__ import annotations

import statistics

from _common import Study, args_entry, conll_grid, f1_cell, run_conll_grid, runs_of, split_list, torch_threads

STUDY = Study("compare_layers_conll", fusions="concat,dwatt", epochs=25, threads=1, options=(("--choices", dict(
    default="all,auto:2,auto:3,5-6,4-6",  # all 1..6, nu's best 2 and 3, the top 2 and 3 layers
    help="layer choices, separated by commas at the top level; a choice is one --layers spec, with '-' or '..' "
         "ranges or '+' between layers (5-6, 4+5+6, 1..6), 'all' or 'auto:K'")),))


def parse_choices(text: str) -> list[str]:
    """``"all,auto:2,5-6,4+5+6"`` -> ``["all", "auto:2", "5-6", "4,5,6"]`` (``+`` joins the layers of
    one choice, since commas separate choices)."""
    return [c.replace("+", ",") for c in split_list(text)]


def record_bytes(config, data, record: dict) -> None:
    """`run_grid`'s annotate hook, run beside the run's own data: what it read from the cache."""
    nbytes = {"train": int(data.train.hidden.nbytes), "dev": int(data.dev.hidden.nbytes)}
    record.update(bytes_loaded=nbytes["train"] + nbytes["dev"], bytes=nbytes,
                  train_layers_loaded=list(data.train.layers))


def _layers_text(layers) -> str:
    return ",".join(str(x) for x in layers)


def _choice(choice: str, *, num_layers: int) -> tuple[str, bool]:
    """A layer choice's name in the table, and whether it is auto:K (layers picked per run)."""
    from layerfuse.layers import parse_layers

    spec = parse_layers(choice, num_layers=num_layers)
    if choice == "all":
        return f"all ({spec.candidates[0]}..{spec.candidates[-1]})", False
    return (choice, True) if spec.k is not None else (_layers_text(spec.candidates), False)


def _row(runs: list[dict], *, auto: bool) -> str:
    """The cells after the choice's name: F1, layers fused (per seed where they differ, or auto:K), s, MB."""
    if not runs:
        return "- | - | - | - | -"
    picked = [_layers_text(r["layers"]) for r in runs]
    fused = picked[0] if len(set(picked)) == 1 and not auto else " / ".join(picked)
    secs = statistics.median(r["wall_seconds"] for r in runs)
    mb = statistics.mean(r["bytes_loaded"] for r in runs) / 1e6
    return f"{f1_cell(runs)} | {f1_cell(runs, 'test_f1_at_best')} | {fused} | {secs:.1f} | {mb:.1f}"


def table(records: list[dict], fusions: list[str], shots: list[int], choices: list[str], *, num_layers: int) -> str:
    """Markdown: one row per (fusion, N, layer choice); best dev F1 x100 (mean ± std over seeds, runs),
    the layers fused (per seed when they differ: auto:K), median wall seconds and mean MB loaded per run.
    A choice's runs are found by its canonical spec (`all` ran as the default layers: None)."""
    from layerfuse.layers.spec import canonical_layers

    lines = ["| fusion | N | layers | dev F1 | test F1 | layers fused | s/run | MB loaded/run |",
             "|---|---:|---|---|---|---|---:|---:|"]
    for fusion in fusions:
        for n in shots:
            for choice in choices:
                runs = sorted(runs_of(records, fusion=fusion, shots=n,
                                      layers=canonical_layers(choice, num_layers=num_layers)),
                              key=lambda r: r["config"]["seed"])
                name, auto = _choice(choice, num_layers=num_layers)
                lines.append(f"| {fusion} | {n} | {name} | {_row(runs, auto=auto)} |")
    return "\n".join(lines)


def caption(args, model: str | None, *, num_layers: int) -> str:
    seeds = " / ".join(str(s) for s in range(args.seeds))
    return (f"CoNLL-2003 dev, {model} FE, {args.epochs} epochs, lr {args.lr:g}, batch {args.batch_size}, "
            f"{args.eval_points} dev evaluations per run (full dev), seeds 0..{args.seeds - 1}. dev F1: best dev F1 "
            f"x100, mean ± std over seeds (runs); test F1: at the best dev point. layers fused: per seed ({seeds}) "
            f"where they differ. s/run: median wall seconds of a run, cache reads included. MB loaded/run: "
            f"mean over seeds of the bytes of hidden states read from the cache for the run (its train sample, "
            f"with all {num_layers} layers for auto:K so they can be ranked, plus dev with the fused layers only), "
            f"float16 storage, so rows x layers x d x 2 bytes; MB = 10^6 bytes.")


def main(argv: list[str] | None = None) -> str:
    """Each run reads what it needs from the cache (its sample, the candidate layers) and records it."""
    from layerfuse.experiments import load_run

    args = STUDY.parse(__doc__, argv)
    choices = parse_choices(args.choices)
    with torch_threads(args.threads):
        entry = args_entry(args)
        L = entry.num_layers
        for choice in choices:
            _choice(choice, num_layers=L)  # a bad choice fails now, not after an hour of runs
        records = run_conll_grid(args, entry, conll_grid(args, axes={"layers": choices}), load=load_run,
                                 load_per_run=True, annotate=record_bytes)
    model = entry.meta.get("model")
    text = caption(args, model, num_layers=L) + "\n\n" \
        + table(records, split_list(args.fusions), split_list(args.shots, int), choices, num_layers=L)
    return STUDY.publish(args, argv, text, title=f"Layer choice on CoNLL-2003 ({model}, FE)", records=records,
                         entry=entry)


if __name__ == "__main__":
    main()
