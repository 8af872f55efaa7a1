"""Where should z_L come from when the fused layers are picked by variability? The last fused layer
(``--query-layer fused``) against the backbone's top layer (``--query-layer top``), with ``--layers auto:3``.

DWAtt's query and residual, Base's output and the extra layers' input are z_L. With auto:3 the fused
set is often low layers, so ``fused`` takes z_L from the third pick where the DWAtt paper takes the
top layer. Per backbone, head and N: each variant's dev and test F1 (mean ± 95% CI) and the paired
difference top − fused (both variants of a seed share the sample and the fused layers).

    python scripts/compare_query_layer_conll.py --data PATH/conll2003
    python scripts/compare_query_layer_conll.py --models all-MiniLM-L6-v2 --cache-dirs PATH/minilm --seeds 1

Each model's runs go to <--out stem>.<model>.jsonl.
"""

from __future__ import annotations

from pathlib import Path

from _common import (
    Study,
    conll_entry,
    conll_grid,
    dev_line,
    run_variants,
    runs_of,
    split_list,
    torch_threads,
)

from layerfuse.experiments.paired import against_zero, ci_cell, paired_diffs

VARIANTS = ("fused", "top")
STUDY = Study(
    "compare_query_layer_conll", fusions="dwatt,base,extra", epochs=25, threads=1, library_defaults=True,
    options=(("--models", dict(default="all-MiniLM-L6-v2,all-mpnet-base-v2", help="comma-separated backbones")),
             ("--layers", dict(default="auto:3", help="the fused layers (a --layers spec)")),
             ("--cache-dirs", dict(default=None, help="cache folder of each model (comma-separated, or one for "
                                                      "all; default: --cache-dir)")),
             ("--dev-sentences", dict(type=int, default=1000, help="fixed random subset of dev (0 = all)")),
             ("--precision", dict(default="auto", choices=["auto", "fp32", "bf16"],
                                  help="autocast of the heads (auto: bf16 where this CPU runs it faster)"))))


def by_seed(records: list[dict], **config) -> dict:
    return {r["config"]["seed"]: r for r in runs_of(records, **config)}


def table(by_entry: dict, fusions: list[str], shots: list[int]) -> str:
    lines = ["| backbone | head | N | metric | fused | top | top − fused, paired | 95% CI against 0 | per seed |",
             "|---|---|---:|---|---:|---:|---:|---|---|"]
    for model, records in by_entry.items():
        for fusion in fusions:
            for n in shots:
                runs = {v: by_seed(records, fusion=fusion, shots=n, query_layer=v) for v in VARIANTS}
                for metric, key in (("dev F1", "best_dev_f1"), ("test F1", "test_f1_at_best")):
                    cells = [ci_cell([100 * r[key] for r in runs[v].values() if r.get(key) is not None])
                             for v in VARIANTS]
                    diffs = paired_diffs(runs["top"], runs["fused"], key=key)
                    lines.append(f"| {model} | {fusion} | {n} | {metric} | {cells[0]} | {cells[1]} "
                                 f"| {ci_cell(diffs, signed=True)} | {against_zero(diffs) if diffs else '-'} "
                                 f"| {', '.join(f'{d:+.1f}' for d in diffs)} |")
    return "\n".join(lines)


def picks(by_entry: dict, entries: dict) -> str:
    """The layers fused per N and seed (one sample per N and seed: the same for both variants), read
    from the DWAtt runs under fused (base and the extra layers hold z_L alone)."""
    lines = []
    for model, records in by_entry.items():
        seen: dict = {}
        for r in runs_of(records, fusion="dwatt", query_layer="fused"):
            seen.setdefault(r["config"]["shots"], {})[r["config"]["seed"]] = ",".join(map(str, r["layers"]))
        for n, by in sorted(seen.items()):
            lines.append(f"- {model} (L = {entries[model].num_layers}), N = {n}: "
                         + " / ".join(f"seed {s}: {by[s]}" for s in sorted(by)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    """Both variants of every head, N and seed, on the --layers pick, on each model's entry (under
    its folder of --cache-dirs: one per model, or one for all, none = --cache-dir)."""
    from layerfuse.training.runtime import resolve_precision

    args = STUDY.parse(__doc__, argv)
    models, dirs = split_list(args.models), split_list(args.cache_dirs or "")
    if len(dirs) not in (0, 1, len(models)):
        raise SystemExit(f"error: --cache-dirs names {len(dirs)} folders for {len(models)} models")
    dirs = dirs * len(models) if len(dirs) == 1 else dirs or [args.cache_dir] * len(models)
    args.precision = resolve_precision(args.precision)  # auto resolved once, so every run records the same
    fields = dict(layers=args.layers, dev_sentences=args.dev_sentences or None, precision=args.precision)
    with torch_threads(args.threads):
        entries = {Path(model).name: conll_entry(args.data, model=model, cache_dir=folder)
                   for model, folder in zip(models, dirs)}
        by_entry = run_variants(args, entries, conll_grid(args, axes={"query_layer": list(VARIANTS)}, **fields))
    caption = (f"CoNLL-2003, FE with `--layers {args.layers}`, {args.epochs} epochs, each head's default learning "
               f"rate, DWAtt's {args.layer_score} score, batch {args.batch_size}, {args.eval_points} dev evaluations "
               f"per run, precision {args.precision}, seeds 0..{args.seeds - 1}. Cells: F1 x100, mean ± 95% CI "
               f"(Student t) over seeds (runs); test F1 at the best dev point. top − fused: per seed, both variants "
               f"on the same sample and the same fused layers.")
    layers = (f"Fused layers ({args.layers} on the run's sample; base and the extra layers read z_L alone: the "
              f"last of them under fused, the top layer under top):")
    text = "\n\n".join([caption, table(by_entry, split_list(args.fusions), split_list(args.shots, int)),
                         layers, picks(by_entry, entries)])
    first = next(iter(entries.values()))
    return STUDY.publish(args, argv, text, records=[r for runs in by_entry.values() for r in runs],
                         title=f"z_L from the last fused layer or the top layer ({args.layers}, CoNLL-2003, FE)",
                         dev=dev_line(args.dev_sentences or None, first.split("dev").n_sentences))


if __name__ == "__main__":
    main()
