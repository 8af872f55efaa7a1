"""An 8-bit cache against the float16 one: the same model and data extracted twice (`extract
--dtype float16` and `--dtype int8`), then, side by side, bytes per word on disk, extraction
words/s (train), the seconds to read all of dev (every layer), best dev and test F1 of each head at
each N over seeds (the same samples on both caches), and nu per layer on train with its ranking.

    python scripts/compare_int8_cache.py                                  # concat, dwatt x N=8,128 x 3 seeds
    python scripts/compare_int8_cache.py --seeds 1 --shots 8 --epochs 1 --out /tmp/x.jsonl --table /tmp/x.md

Each dtype's runs go to <--out stem>.<dtype>.jsonl (run ids do not name the cache).
"""

from __future__ import annotations

import os
import statistics
import time

from _common import (
    Study,
    conll_grid,
    f1_cell,
    run_variants,
    runs_of,
    split_list,
    torch_threads,
    variant_entry,
    variant_results,
)

STUDY = Study(
    "compare_int8_cache", fusions="concat,dwatt", epochs=10, threads=1, library_defaults=True,
    options=(("--dtypes", dict(default="float16,int8")),
             ("--measure-only", dict(action="store_true", help="bytes, speeds and nu only, no heads (a backbone "
                                                              "with random weights, say)"))))


def measure(entry) -> dict:
    """Bytes per word (every split), train extraction words/s, seconds to read dev, nu per layer."""
    from layerfuse.cache.manage import bytes_on_disk
    from layerfuse.layers.scores import score_layers

    words = sum(entry.split(s).group.attrs["n_words"] for s in entry.splits)
    dev = entry.split("dev")
    t0 = time.perf_counter()
    dev.hidden()
    read_s = time.perf_counter() - t0
    train = entry.split("train")
    return {"nu": score_layers(train, seed=0), "bytes_per_word": bytes_on_disk(entry.path) / words,
            "train_words_per_s": train.group.attrs.get("words_per_second") or 0.0, "dev_read_s": read_s}


def table(records: dict[str, list[dict]], measured: dict[str, dict], fusions: list[str], shots: list[int]) -> str:
    dtypes = list(records)
    lines = ["| | " + " | ".join(dtypes) + " |", "|---" * (len(dtypes) + 1) + "|"]
    rows = [("bytes per word (all splits)", lambda m: f"{m['bytes_per_word']:,.0f}"),
            ("extraction, train words/s", lambda m: f"{m['train_words_per_s']:,.0f}"),
            ("read all of dev, s", lambda m: f"{m['dev_read_s']:.2f}"),
            ("nu per layer (train)", lambda m: ", ".join(f"{layer}: {nu:.3f}" for layer, nu in m["nu"])),
            ("layers by nu, best first",
             lambda m: ", ".join(str(layer) for layer, _ in sorted(m["nu"], key=lambda pair: pair[1])))]
    lines += [f"| {label} | " + " | ".join(get(measured[d]) for d in dtypes) + " |" for label, get in rows]
    for fusion in fusions:
        for n in shots:
            for metric, name in (("best_dev_f1", "dev F1"), ("test_f1_at_best", "test F1")):
                cells = [f1_cell(runs_of(records[d], fusion=fusion, shots=n), metric) for d in dtypes]
                lines.append(f"| {fusion} N = {n}, {name} | " + " | ".join(cells) + " |")
    if len(dtypes) == 2:
        other = {r["run_id"]: r for r in records[dtypes[1]]}
        pairs = [abs(a["best_dev_f1"] - other[a["run_id"]]["best_dev_f1"]) * 100 for a in records[dtypes[0]]
                 if a["run_id"] in other]
        if pairs:
            lines.append(f"| per-run dev F1 difference, mean / largest ({len(pairs)} runs) | "
                         f"{statistics.mean(pairs):.2f} / {max(pairs):.2f} | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    args = STUDY.parse(__doc__, argv)
    with torch_threads(args.threads):
        entries = {dtype: variant_entry(args, dtype=dtype) for dtype in split_list(args.dtypes)}
        measured = {dtype: measure(entry) for dtype, entry in entries.items()}
        by_dtype = run_variants(args, entries, [] if args.measure_only else conll_grid(args))
    model = next(iter(entries.values())).meta.get("model")
    heads = ("" if args.measure_only else
             f" F1 x100, mean ± std over seeds 0..{args.seeds - 1} (runs), the same N-way sample per seed on both "
             f"caches; {args.epochs} epochs at each head's default rate, {args.eval_points} evaluations per run on "
             f"all of dev, test F1 at the best dev point.")
    caption = (f"{model or args.model} on {os.path.basename(os.path.normpath(args.data))}: the same extraction "
               f"stored as float16 and as int8 with one scale per vector (per row and layer).{heads} Extraction "
               f"words/s is what `extract` recorded (forward pass and writing); the dev read is one pass over every "
               f"layer into memory, as float16.")
    fusions = [] if args.measure_only else split_list(args.fusions)
    text = caption + "\n\n" + table(by_dtype, measured, fusions, split_list(args.shots, int))
    return STUDY.publish(args, argv, text, title="An 8-bit cache against float16", dev="all of dev",
                         records=[r for runs in by_dtype.values() for r in runs],
                         note=f"One JSON line per run in `{variant_results(args.out, '<dtype>')}`.")


if __name__ == "__main__":
    main()
