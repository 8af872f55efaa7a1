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

from _common import (
    Study,
    conll_grid,
    pair_table,
    results_path,
    run_variants,
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
    if args.table is None:
        args.table = results_path(STUDY.name + ("_special" if args.special_tokens else ""))
    with torch_threads(args.threads):
        entries = {g: variant_entry(args, granularity=g, special_tokens=variant(args, g) != g)
                   for g in split_list(args.granularities)}
        by_granularity = run_variants(args, entries, conll_grid(args),
                                      lambda g: variant_results(args.out, variant(args, g)))
    records = [r for runs in by_granularity.values() for r in runs]
    device = next((r["device"] for r in records), args.device)
    rows = {g: int(entry.split("train").n_rows) for g, entry in entries.items()}
    text = caption(args, next(iter(entries.values())).meta.get("model") or args.model, rows, device or "cpu") \
        + "\n\n" + pair_table(by_granularity, "word", "subword", split_list(args.fusions), split_list(args.shots, int))
    title = "R+n over words or over subwords" + (" and special tokens" if args.special_tokens else "")
    return STUDY.publish(args, argv, text, title=title, records=records, dev="all of dev",
                         note=f"One JSON line per run in `{variant_results(args.out, '<granularity>')}`.")


if __name__ == "__main__":
    main()
