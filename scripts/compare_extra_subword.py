"""R+n as the paper built it? The extra transformer layers over one vector per word (today's
word-level cache: each word's first subword) against the same layers over every subword of the
sentence (a subword-granularity cache; tags read at each word's first subword), with concat and
dwatt beside them on both inputs.

Runs --fusions x --shots x --seeds on each cache of --granularities through
`layercache.experiments.run_grid` (one JSON-lines file per granularity: <--out stem>.<granularity>.jsonl;
runs already there are skipped), then writes a markdown table of best dev F1 and test F1 at the best
dev point (x100, mean ± std over seeds) per fusion and N, and the subword − word difference.

    python scripts/compare_extra_subword.py                          # extra, concat, dwatt x N=8,128 x 3 seeds
    python scripts/compare_extra_subword.py --seeds 1 --shots 8 --epochs 1 --out /tmp/x.jsonl --table /tmp/x.md
    python scripts/compare_extra_subword.py --special-tokens         # the subword input with [CLS] and [SEP]

The caches are the ones `extract --model all-MiniLM-L6-v2 --dataset <data> [--granularity subword
[--special-tokens]]` make (extracted here first when missing), under --cache-dir, else $LAYERCACHE_HOME.
By default neither cache holds the special tokens ([CLS]/<s>, [SEP]/</s>): the subword sequence the
extra layers see is the sentence's own subwords. With --special-tokens the subword cache also holds
their rows, so the extra layers attend over the backbone's whole input as the paper's R26 does (no
tag is read there); its runs go to <--out stem>.subword-special.jsonl and its table to
docs/results/compare_extra_subword_special.md unless --table says otherwise.
"""

from __future__ import annotations

import argparse
import statistics

from _common import (
    RESULTS,
    at_library_defaults,
    conll_grid,
    f1_cell,
    grid_parser,
    run_conll_grid,
    runs_of,
    split_list,
    torch_threads,
    variant_entry,
    variant_results,
    write_results,
)

from layercache.training.config import default_lr

FUSIONS = "extra,concat,dwatt"
GRANULARITIES = ("word", "subword")


def parse_args(argv=None):
    p = grid_parser(__doc__.split("\n\n")[0], fusions=FUSIONS, epochs=10, threads=1,
                    out="compare_extra_subword.jsonl")
    at_library_defaults(p)
    p.add_argument("--granularities", default=",".join(GRANULARITIES))
    p.add_argument("--special-tokens", action="store_true",
                   help="the subword cache also holds the special tokens' rows (extract --special-tokens)")
    p.add_argument("--table", default=None,
                   help="markdown file the table is written to ('' = print only; default: "
                        "docs/results/compare_extra_subword.md, or compare_extra_subword_special.md with "
                        "--special-tokens)")
    args = p.parse_args(argv)
    if args.table is None:
        args.table = str(RESULTS / ("compare_extra_subword_special.md" if args.special_tokens
                                    else "compare_extra_subword.md"))
    return args


def with_specials(args, granularity: str) -> bool:
    return bool(args.special_tokens) and granularity == "subword"


def out_of(args, granularity: str) -> str:
    return variant_results(args.out, f"{granularity}-special" if with_specials(args, granularity) else granularity)


def entry_of(args, granularity: str):
    if args.cache:
        raise SystemExit("compare_extra_subword: --cache names one entry; this script needs one per granularity")
    # Named either way, so an entry with the special rows is never taken for one without (nor the reverse).
    return variant_entry(args, granularity=granularity, special_tokens=with_specials(args, granularity))


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


def main(argv=None) -> str:
    args = parse_args(argv)
    records, rows, model = {}, {}, args.model
    with torch_threads(args.threads):
        for granularity in split_list(args.granularities):
            entry = entry_of(args, granularity)
            model = entry.meta.get("model", model)
            rows[granularity] = int(entry.split("train").n_rows)
            run_args = argparse_copy(args, out=out_of(args, granularity))
            records[granularity] = run_conll_grid(run_args, entry, conll_grid(args))
    device = next((r["device"] for rs in records.values() for r in rs), args.device or "cpu")
    text = caption(args, model, rows, device) + "\n\n" + table(records, split_list(args.fusions),
                                                                  split_list(args.shots, int))
    print("\n" + text)
    if args.table:
        write_results(args.table, text + f"\n\nOne JSON line per run in `{out_of(args, '<granularity>')}`.",
                      title="R+n over words or over subwords" + (" and special tokens" if args.special_tokens else ""),
                      script="compare_extra_subword", argv=argv,
                      device=device, dev="all of dev")
    return text


def argparse_copy(args, **changes):
    return argparse.Namespace(**{**vars(args), **changes})


if __name__ == "__main__":
    main()
