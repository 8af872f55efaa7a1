"""R+n as the paper built it? The extra transformer layers over one vector per word (today's
word-level cache: each word's first subword) against the same layers over every subword of the
sentence (a subword-granularity cache; tags read at each word's first subword), with concat and
dwatt beside them on both inputs.

    python scripts/compare_extra_subword.py                          # extra, concat, dwatt x N=8,128 x 3 seeds
    python scripts/compare_extra_subword.py --seeds 1 --shots 8 --epochs 1 --out /tmp/x.jsonl --table /tmp/x.md
    python scripts/compare_extra_subword.py --special-tokens         # the subword input with [CLS] and [SEP]

Runs --fusions x --shots x --seeds on the cache of each of --granularities (one JSON-lines file per
granularity, <--out stem>.<granularity>.jsonl) and writes best dev F1 and test F1 at the best dev
point (x100, mean ± std over seeds) per fusion and N, and the subword − word difference. With
--special-tokens the subword cache also holds the rows of [CLS]/<s> and [SEP]/</s>, so the extra
layers attend over the backbone's whole input as the paper's R26 does (no tag is read there); its
runs go to <--out stem>.subword-special.jsonl and its table to
docs/results/compare_extra_subword_special.md unless --table says otherwise.
"""

from __future__ import annotations

import statistics

from _common import (
    RESULTS,
    Study,
    conll_grid,
    f1_cell,
    run_conll_grid,
    runs_of,
    split_list,
    torch_threads,
    variant_entry,
    variant_results,
)

from layerfuse.training.config import default_lr

STUDY = Study(
    "compare_extra_subword", fusions="extra,concat,dwatt", epochs=10, threads=1, library_defaults=True,
    defaults=dict(table=None),
    options=(("--granularities", dict(default="word,subword")),
             ("--special-tokens", dict(action="store_true", help="the subword cache also holds the special tokens' "
                                       "rows (extract --special-tokens)"))))


def variant(args, granularity: str) -> str:
    """The cache's name: an entry with the special rows is never taken for one without (nor the reverse)."""
    return f"{granularity}-special" if args.special_tokens and granularity == "subword" else granularity


def table(records: dict[str, list[dict]], fusions: list[str], shots: list[int]) -> str:
    word, sub = records.get("word", []), records.get("subword", [])
    lines = ["| fusion | N | word dev F1 | subword dev F1 | subword − word | word test F1 | subword test F1 "
             "| word s/run | subword s/run |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for fusion in fusions:
        for n in shots:
            w, s = runs_of(word, fusion=fusion, shots=n), runs_of(sub, fusion=fusion, shots=n)
            diff = "-"
            if w and s:
                delta = statistics.mean(r["best_dev_f1"] for r in s) - statistics.mean(r["best_dev_f1"] for r in w)
                diff = f"{100 * delta:+.1f}"
            secs = [f"{statistics.median(r['seconds']['total'] for r in runs):.1f}" if runs else "-" for runs in (w, s)]
            lines.append(f"| {fusion} | {n} | {f1_cell(w)} | {f1_cell(s)} | {diff} | "
                         f"{f1_cell(w, 'test_f1_at_best')} | {f1_cell(s, 'test_f1_at_best')} | {secs[0]} | {secs[1]} |")
    return "\n".join(lines)


def caption(args, model: str, rows: dict[str, int], device: str) -> str:
    lrs = ", ".join(f"{f} {default_lr(f):g}" for f in split_list(args.fusions)) if args.lr is None else f"{args.lr:g}"
    sizes = "; ".join(f"{g}: {n:,} train rows" for g, n in rows.items())
    specials = ("with the special tokens' rows before and after it ([CLS] and [SEP], or <s> and </s>: the "
                "backbone's whole input), no tag read there" if args.special_tokens else "special tokens not cached")
    return (f"CoNLL-2003, {model}, FE: the heads over one vector per word (word: each word's first subword) "
            f"or over every subword of the sentence (subword; tags read at first subwords, {specials}) "
            f"({sizes}). Best dev entity F1 x100 over all of dev, evaluated at {args.eval_points} evenly "
            f"spaced points per run, and test F1 at the best dev point; mean ± std over seeds 0..{args.seeds - 1} "
            f"(runs). {args.epochs} epochs, lr {lrs} (linear decay), batch {args.batch_size}, DWAtt score "
            f"{args.layer_score}; the same N-way sample per seed on both inputs. s/run: median seconds per run "
            f"on {device}.")


def main(argv: list[str] | None = None) -> str:
    args = STUDY.parse(__doc__, argv)
    if args.cache:
        raise SystemExit("compare_extra_subword: --cache names one entry; this script needs one per granularity")
    args.table = args.table if args.table is not None else str(RESULTS / (
        "compare_extra_subword_special.md" if args.special_tokens else "compare_extra_subword.md"))
    with torch_threads(args.threads):
        entries = {g: variant_entry(args, granularity=g, special_tokens=variant(args, g) != g)
                   for g in split_list(args.granularities)}
        by_granularity = {g: run_conll_grid(args, e, conll_grid(args), variant_results(args.out, variant(args, g)))
                          for g, e in entries.items()}
    records = [r for runs in by_granularity.values() for r in runs]
    first = next(iter(entries.values()))
    device = next((r["device"] for r in records), args.device)
    rows = {g: int(entry.split("train").n_rows) for g, entry in entries.items()}
    text = caption(args, first.meta.get("model") or args.model, rows, device or "cpu") + "\n\n" \
        + table(by_granularity, split_list(args.fusions), split_list(args.shots, int))
    title = "R+n over words or over subwords" + (" and special tokens" if args.special_tokens else "")
    return STUDY.publish(args, argv, text, title=title, records=records, dev="all of dev",
                         note=f"One JSON line per run in `{variant_results(args.out, '<granularity>')}`.")


if __name__ == "__main__":
    main()
