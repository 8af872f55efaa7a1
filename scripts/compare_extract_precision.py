"""`extract --precision bf16` as a user's choice: its speed against fp32, and whether heads trained
on the bf16 cache score like heads trained on the fp32 one (CoNLL-2003, all-MiniLM-L6-v2; concat
and dwatt, N = 128, 3 seeds, layerfuse's defaults; test F1 at the best dev point).

    python scripts/compare_extract_precision.py

Extracts the CoNLL-2003 train, dev and test splits twice (forward in fp32, then under bf16
autocast; both stored as float16) into --cache-dir, unless already there; the words/s are those
`extract` itself records for each split. Then runs the heads on each cache (results in --out, one
file per cache; reruns skip runs done) and writes the table to --table.
"""

from __future__ import annotations

import os
import statistics

from _common import REPO, Study, conll_data, conll_grid, run_variants, runs_of, say, split_list, torch_threads

PRECISIONS = ("fp32", "bf16")
CACHE_DIR = str(REPO / "runs" / "extract_precision" / "cache")  # both precisions side by side
STUDY = Study("compare_extract_precision", out="extract_precision", fusions="concat,dwatt", epochs=25,
              library_defaults=True, shots="128", defaults=dict(workers=None, cache_dir=CACHE_DIR))


def extracted(args, precision: str):
    """The entry of ``precision``, extracted first when missing (--cache-dir holds both side by side)."""
    from layerfuse.cache.reader import open_entry
    from layerfuse.extract.run import ExtractConfig, extract

    config = ExtractConfig(model=args.model, dataset=conll_data(args.data), precision=precision,
                           cache_dir=args.cache_dir)
    return open_entry(extract(config, progress=True, log=say).path)


def words_per_second(entry) -> float:
    """What `extract` recorded for the entry's train and dev splits together."""
    stats = [entry.split(s).attrs for s in ("train", "dev") if s in entry.splits]
    return sum(a["n_words"] for a in stats) / sum(a["seconds"] for a in stats)


def table(by_precision: dict, speeds: dict, fusions: list[str]) -> str:
    """Words/s and mean F1 per precision and fusion, then bf16 − fp32 seed by seed."""
    lines = ["| forward | words/s (train + dev) | fusion | dev F1 | test F1 |", "|---|---:|---|---:|---:|"]
    for precision, records in by_precision.items():
        for fusion in fusions:
            mine = runs_of(records, fusion=fusion)
            dev = statistics.mean(100 * r["best_dev_f1"] for r in mine)
            test = statistics.mean(100 * r["test_f1_at_best"] for r in mine)
            lines.append(f"| {precision} | {speeds[precision]:,.0f} | {fusion} | {dev:.2f} | {test:.2f} |")

    def by_seed(precision, fusion):
        return sorted(runs_of(by_precision[precision], fusion=fusion), key=lambda r: r["config"]["seed"])

    lines += ["", "bf16 minus fp32, seed by seed (dev F1 x100): " + ", ".join(
        f"{f}: " + " ".join(f"{100 * (b['best_dev_f1'] - a['best_dev_f1']):+.2f}"
                            for a, b in zip(by_seed("fp32", f), by_seed("bf16", f))) for f in fusions)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    args = STUDY.parse(__doc__, argv)
    if args.cache:
        raise SystemExit("compare_extract_precision: --cache names one entry; this script extracts one per precision")
    if len(split_list(args.shots)) != 1:  # the table has no N column: several would be pooled into one row
        raise SystemExit(f"compare_extract_precision: --shots takes one N, got {args.shots}")
    with torch_threads(args.threads):
        entries = {precision: extracted(args, precision) for precision in PRECISIONS}
        by_precision = run_variants(args, entries, conll_grid(args), lambda p: os.path.join(args.out, f"{p}.jsonl"))
    speeds = {p: words_per_second(entry) for p, entry in entries.items()}
    text = table(by_precision, speeds, split_list(args.fusions))
    return STUDY.publish(args, argv, text, title="`extract --precision bf16` against fp32",
                         records=by_precision["fp32"] + by_precision["bf16"], entry=entries["fp32"])


if __name__ == "__main__":
    main()
