"""`extract --precision bf16` as a user's choice: its speed against fp32, and whether heads trained
on the bf16 cache score like heads trained on the fp32 one (CoNLL-2003, all-MiniLM-L6-v2; concat
and dwatt, N = 128, 3 seeds, layerfuse's defaults; test F1 at the best dev point).

    python scripts/compare_extract_precision.py

Extracts the CoNLL-2003 train, dev and test splits twice (forward in fp32, then under bf16
autocast; both stored as float16) into --cache-dir, unless already there; the words/s are those
`extract` itself records for each split. Then runs the heads on each cache through
`layerfuse.experiments.run_grid` (results in --out, one file per cache; reruns skip runs done).
The table goes to --table (docs/results/compare_extract_precision.md).
"""

from __future__ import annotations

import statistics

from _common import REPO, conll_data, grid_main, in_folder, say, split_list

PRECISIONS = ("fp32", "bf16")


def entries(args) -> dict:
    """Each precision's entry, extracted first when missing (--cache-dir holds both side by side)."""
    from layerfuse.cache.reader import open_entry
    from layerfuse.extract.run import ExtractConfig, extract

    if args.cache:
        raise SystemExit("compare_extract_precision: --cache names one entry; this script extracts one per precision")
    return {precision: open_entry(extract(ExtractConfig(model=args.model, dataset=conll_data(args.data),
                                                        precision=precision, cache_dir=args.cache_dir),
                                          progress=True, log=say).path) for precision in PRECISIONS}


def words_per_second(entry) -> float:
    """What `extract` recorded for the entry's train and dev splits together."""
    stats = [entry.split(s).attrs for s in ("train", "dev") if s in entry.splits]
    return sum(a["n_words"] for a in stats) / sum(a["seconds"] for a in stats)


def text(run) -> str:
    fusions = split_list(run.args.fusions)
    lines = ["| forward | words/s (train + dev) | fusion | dev F1 | test F1 |", "|---|---:|---|---:|---:|"]
    for precision, records in run.by_entry.items():
        for fusion in fusions:
            mine = [r for r in records if r["config"]["fusion"] == fusion]
            dev = statistics.mean(100 * r["best_dev_f1"] for r in mine)
            test = statistics.mean(100 * r["test_f1_at_best"] for r in mine)
            lines.append(f"| {precision} | {run.measured[precision]:,.0f} | {fusion} | {dev:.2f} | {test:.2f} |")
    lines += ["", "bf16 minus fp32, seed by seed (dev F1 x100): " + ", ".join(
        f"{f}: " + " ".join(f"{100 * (b['best_dev_f1'] - a['best_dev_f1']):+.2f}" for a, b in _pairs(run.by_entry, f))
        for f in fusions)]
    return "\n".join(lines)


def _pairs(runs: dict, fusion: str):
    key = lambda r: r["config"]["seed"]  # noqa: E731
    fp32 = sorted((r for r in runs["fp32"] if r["config"]["fusion"] == fusion), key=key)
    bf16 = sorted((r for r in runs["bf16"] if r["config"]["fusion"] == fusion), key=key)
    return zip(fp32, bf16)


CACHE_DIR = str(REPO / "runs" / "extract_precision" / "cache")  # both precisions side by side
GRID = dict(
    name="compare_extract_precision", out="extract_precision", fusions="concat,dwatt", epochs=25,
    library_defaults=True, defaults=dict(shots="128", workers=None, cache_dir=CACHE_DIR), entries=entries,
    measure=words_per_second, results=in_folder, text=text, title=lambda run: "`extract --precision bf16` against fp32")
main = grid_main(GRID, __doc__)

if __name__ == "__main__":
    main()
