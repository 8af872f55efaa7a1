"""R+n as the paper built it? The extra transformer layers over one vector per word (today's
word-level cache: each word's first subword) against the same layers over every subword of the
sentence (a subword-granularity cache; tags read at each word's first subword), with concat and
dwatt beside them on both inputs.

Runs --fusions x --shots x --seeds on each cache of --granularities through
`layerfuse.experiments.run_grid` (one JSON-lines file per granularity: <--out stem>.<granularity>.jsonl;
runs already there are skipped), then writes a markdown table of best dev F1 and test F1 at the best
dev point (x100, mean ± std over seeds) per fusion and N, and the subword − word difference.

    python scripts/compare_extra_subword.py                          # extra, concat, dwatt x N=8,128 x 3 seeds
    python scripts/compare_extra_subword.py --seeds 1 --shots 8 --epochs 1 --out /tmp/x.jsonl --table /tmp/x.md
    python scripts/compare_extra_subword.py --special-tokens         # the subword input with [CLS] and [SEP]

The caches are the ones `extract --model all-MiniLM-L6-v2 --dataset <data> [--granularity subword
[--special-tokens]]` make (extracted here first when missing), under --cache-dir, else $LAYERFUSE_HOME.
By default neither cache holds the special tokens ([CLS]/<s>, [SEP]/</s>): the subword sequence the
extra layers see is the sentence's own subwords. With --special-tokens the subword cache also holds
their rows, so the extra layers attend over the backbone's whole input as the paper's R26 does (no
tag is read there); its runs go to <--out stem>.subword-special.jsonl and its table to
docs/results/compare_extra_subword_special.md unless --table says otherwise.
"""

from __future__ import annotations

import statistics

from _common import RESULTS, f1_cell, grid_main, runs_of, split_list, variant_entry, variant_results

from layerfuse.training.config import default_lr

GRANULARITIES = ("word", "subword")


def check(args) -> None:
    if args.table is None:
        args.table = str(RESULTS / ("compare_extra_subword_special.md" if args.special_tokens
                                    else "compare_extra_subword.md"))


def with_specials(args, granularity: str) -> bool:
    return bool(args.special_tokens) and granularity == "subword"


def out_of(args, granularity: str) -> str:
    return variant_results(args.out, f"{granularity}-special" if with_specials(args, granularity) else granularity)


def entries(args) -> dict:
    if args.cache:
        raise SystemExit("compare_extra_subword: --cache names one entry; this script needs one per granularity")
    # Named either way, so an entry with the special rows is never taken for one without (nor the reverse).
    return {g: variant_entry(args, granularity=g, special_tokens=with_specials(args, g))
            for g in split_list(args.granularities)}


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


def text(run) -> str:
    rows = {g: int(entry.split("train").n_rows) for g, entry in run.entries.items()}
    return caption(run.args, run.model or run.args.model, rows, run.device or "cpu") + "\n\n" \
        + table(run.by_entry, split_list(run.args.fusions), split_list(run.args.shots, int))


GRID = dict(
    name="compare_extra_subword", fusions="extra,concat,dwatt", epochs=10, threads=1, library_defaults=True,
    defaults=dict(table=None), check=check, entries=entries, results=out_of, text=text,
    options=[("--granularities", dict(default=",".join(GRANULARITIES))),
             ("--special-tokens", dict(action="store_true", help="the subword cache also holds the special tokens' "
                                       "rows (extract --special-tokens)"))],
    note=lambda run: f"One JSON line per run in `{out_of(run.args, '<granularity>')}`.",
    title=lambda run: "R+n over words or over subwords" + (" and special tokens" if run.args.special_tokens else ""),
    dev=lambda run: "all of dev")
main = grid_main(GRID, __doc__)

if __name__ == "__main__":
    main()
