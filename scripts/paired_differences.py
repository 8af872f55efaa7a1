"""Paired per-seed differences between heads, from the per-run results files already committed under
docs/results/ (no training: arithmetic on their records).

The heads of one seed train on the same few-shot sample, so the difference between two heads is
best read seed by seed: for each setting (a results file, and FE or FT), N and seed, DWAtt − Concat,
and each head − the extra layers (the paper's deeper baseline); then, per head, FT − FE. Each row
gives the mean of the per-seed differences with its 95% CI (Student t, n − 1 degrees of freedom),
the differences themselves, and beside them the unpaired reading (each head's own mean ± 95% CI). A
pair is formed only when both runs saw the same sample (their ``sample_fingerprint``); a run that
appears in several files (the same ``run_id`` on the same cache entry, ``cache_key``) is counted
once, under the first.

    python scripts/paired_differences.py            # writes docs/results/paired_differences.md
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from _common import RESULTS, paired_cells, read_records, results_path, write_results

from layerfuse.experiments.paired import ci_cell

FILES = ["gpu/compare_fe_ft_conll.jsonl", "gpu/compare_extra_subword.word.jsonl",
         "gpu/compare_extra_subword.subword.jsonl", "gpu/compare_extra_subword.subword-special.jsonl",
         "gpu/compare_int8_cache.float16.jsonl", "gpu/compare_int8_cache.int8.jsonl"]
SETTINGS = {  # what each file's runs are, beside the mode
    "compare_fe_ft_conll": "word cache (float16)",
    "compare_extra_subword.word": "word cache (float16)",
    "compare_extra_subword.subword": "subword cache",
    "compare_extra_subword.subword-special": "subword cache with special tokens",
    "compare_int8_cache.float16": "word cache (float16)",
    "compare_int8_cache.int8": "word cache (int8)",
}
ORDER = ["base", "concat", "dwatt", "extra", "scalarmix"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", default=FILES,
                   help="results files, relative to docs/results/ (default: %(default)s)")
    p.add_argument("--table", default=results_path("paired_differences"))
    return p.parse_args(argv)


def head(config: dict) -> str:
    score = config.get("layer_score", "scaled")
    return f"dwatt ({score})" if config["fusion"] == "dwatt" and score != "scaled" else config["fusion"]


def load(files: list[str]) -> tuple[dict, list[str]]:
    """{(setting, mode, N): {head: {seed: record}}}, each run once; and a note per file."""
    seen: dict[tuple, str] = {}
    cells: dict = defaultdict(lambda: defaultdict(dict))
    notes = []
    for name in files:
        records = read_records(Path(RESULTS) / name)
        # one run: its id (from its config) on one cache entry (the same config on another cache is another run)
        keys = [(r["run_id"], r.get("cache_key", "")) for r in records]
        new = [(k, r) for k, r in zip(keys, records) if k not in seen]
        again = {seen[k] for k in keys if k in seen}
        notes.append(f"`{name}`: {len(records)} runs" + (f", {len(records) - len(new)} of them already counted "
                                                         f"from {', '.join(sorted(again))}" if again else ""))
        for k, r in new:
            seen[k] = f"`{name}`"
            c, stem = r["config"], Path(name).name.removesuffix(".jsonl")
            cells[SETTINGS.get(stem, stem), c.get("mode", "fe"), c["shots"]][head(c)][c["seed"]] = r
    return cells, notes


def own(runs: dict) -> str:
    """A head's own best dev F1 x100, unpaired: mean ± 95% CI."""
    return ci_cell([100 * r["best_dev_f1"] for r in runs.values() if r.get("best_dev_f1") is not None]).split(" (")[0]


def row(setting: str, n: int, name_a: str, name_b: str, a: dict, b: dict) -> str | None:
    cells = paired_cells(a, b, test_against=False)
    return cells and f"| {setting} | {n} | {name_a} − {name_b} | {cells} | {own(a)} against {own(b)} |"


HEADER = ["| setting | N | difference | dev F1, paired: mean ± 95% CI (seeds) | 95% CI against 0 "
          "| per seed (dev) | seeds above 0 | test F1, paired | dev F1, unpaired: each head's mean ± 95% CI |",
          "|---|---:|---|---:|---|---|---:|---:|---|"]


def tables(cells: dict) -> str:
    heads_rows, ft_rows = [], []
    settings = list(dict.fromkeys(k[0] for k in cells))  # in the order of the files
    for (setting, mode, n), by_head in sorted(cells.items(), key=lambda kv: (settings.index(kv[0][0]), *kv[0][1:])):
        # FT runs read no cache: their setting is the fine-tuned backbone (on the same samples)
        where = "backbone fine-tuned (FT)" if mode == "ft" else f"{setting}, FE"
        heads = sorted(by_head, key=lambda x: (ORDER.index(x) if x in ORDER else len(ORDER), x))
        if "dwatt" in by_head and "concat" in by_head:
            heads_rows.append(row(where, n, "dwatt", "concat", by_head["dwatt"], by_head["concat"]))
        if "extra" in by_head:
            heads_rows += [row(where, n, h, "extra", by_head[h], by_head["extra"]) for h in heads if h != "extra"]
        if mode == "ft" and (setting, "fe", n) in cells:
            fe = cells[setting, "fe", n]
            ft_rows += [row(f"FT against FE on the {setting}", n, f"{h} (FT)", f"{h} (FE)", by_head[h], fe[h])
                        for h in heads if h in fe]
    out = ["Between heads, seed by seed (each seed's heads trained on the same sample):", "", *HEADER,
           *[r for r in heads_rows if r]]
    if any(ft_rows):
        out += ["", "FT against FE, per head and seed (the same sample in both modes):", "", *HEADER,
                *[r for r in ft_rows if r]]
    return "\n".join(out)


def main(argv=None) -> str:
    args = parse_args(argv)
    cells, notes = load(args.files)
    records = [r for by_head in cells.values() for runs in by_head.values() for r in runs.values()]
    devices = sorted({str(r.get("device")) for r in records})
    torches = sorted({str(r.get("versions", {}).get("torch")) for r in records})
    dev_subsets = sorted({r["config"].get("dev_sentences") or 0 for r in records})
    dev = ("the whole dev split in every run" if dev_subsets == [0] else
           f"per the runs' own settings (`--dev-sentences` values {dev_subsets}; 0 = the whole split)")
    text = ("Computed from the per-run records of the files below (no run is trained here); best dev entity "
            "F1 and the test F1 at each run's best dev point, x100. '95% CI against 0': whether the paired "
            "interval lies above 0, below 0, or contains it ('inside'). The runs' own settings (epochs, learning "
            "rates, precision) are in each file's table.\n\n"
            + "\n".join(f"- {note}" for note in notes) + "\n\n" + tables(cells))
    write_results(args.table, text, title="Paired per-seed differences between heads", script="paired_differences",
                  argv=argv, dev=dev,
                  machine=f"the runs ran on {', '.join(devices)} (torch {', '.join(torches)}), per their records; "
                          "this table is arithmetic on them")
    print(text)
    return text


if __name__ == "__main__":
    main()
