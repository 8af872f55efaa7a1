"""The design card's command with no training flags, `train-head --fusion concat --shots 8`, on the
CoNLL-2003 MiniLM cache and on the built-in WNUT-16 cache: the same configuration `train-head`
builds from its defaults (10 epochs, the FE learning rate, `--precision auto`), seeds 0-2.

    python scripts/design_card_check.py

The runs go to --out (runs/design_card_check/, one results file per cache; reruns skip the runs
already there); the records of the table's runs to --records (docs/results/design_card_check.jsonl,
one JSON line per run, rewritten) and the table to --table (docs/results/design_card_check.md).
"""

from __future__ import annotations

import argparse
import json
import os

from _common import CONLL, MODEL, REPO, conll_entry, dev_line, results_path, say, write_results


def main(argv=None) -> str:
    from layerfuse.experiments import resolve_entry, run_grid
    from layerfuse.training import TrainConfig
    from layerfuse.training.runtime import resolve_precision

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=CONLL, help="CoNLL-2003 directory")
    p.add_argument("--cache-dir", default=None, help="cache root (default: $LAYERFUSE_HOME)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--out", default=str(REPO / "runs" / "design_card_check"),
                   help="results folder: one JSON-lines file per cache (reruns skip the runs there)")
    p.add_argument("--records", default=results_path("design_card_check", ".jsonl"),
                   help="the table's runs, one JSON line each ('' = none)")
    p.add_argument("--table", default=results_path("design_card_check"), help="markdown file written ('' = print only)")
    args = p.parse_args(argv)
    entries = {"CoNLL-2003": conll_entry(args.data, cache_dir=args.cache_dir),
               "WNUT-16 (built-in)": resolve_entry(model=MODEL, dataset="wnut16", cache_dir=args.cache_dir, log=say)}
    lines = ["| cache | seed | dev F1 | test F1 |", "|---|---:|---:|---:|"]
    precision = resolve_precision("auto")
    os.makedirs(args.out, exist_ok=True)
    kept = []
    for (name, entry), dataset in zip(entries.items(), ("conll2003", "wnut16")):
        configs = [TrainConfig(fusion="concat", shots=8, epochs=10, seed=s, precision=precision)
                   for s in range(args.seeds)]
        records = run_grid(entry, configs, results=os.path.join(args.out, f"{dataset}.jsonl"), workers=0,
                           progress=False, log=say)
        kept += records.values()
        for r in records.values():
            test = "-" if r["test_f1_at_best"] is None else f"{100 * r['test_f1_at_best']:.1f}"
            lines.append(f"| {name} | {r['config']['seed']} | {100 * r['best_dev_f1']:.1f} | {test} |")
    text = (f"`train-head --fusion concat --shots 8` with every other option at its default (10 epochs, the FE "
            f"learning rate, precision {precision}): best dev F1 and the test F1 at that point, x100, per seed.\n\n"
            + "\n".join(lines))
    print(text)
    if args.records:
        with open(args.records, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in kept)
    if args.table:
        dev = "; ".join(f"{name}: {dev_line(None, e.split('dev').n_sentences)}" for name, e in entries.items())
        write_results(args.table, text, title="The design card's command at its defaults", script="design_card_check",
                      argv=argv, dev=dev)
    return text


if __name__ == "__main__":
    main()
