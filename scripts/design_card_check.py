"""The design card's command with no training flags, `train-head --fusion concat --shots 8`, on the
CoNLL-2003 MiniLM cache and on the built-in WNUT-16 cache: the same configuration `train-head`
builds from its defaults (10 epochs, the FE learning rate, `--precision auto`), seeds 0-2.

    python scripts/design_card_check.py
"""

from __future__ import annotations

import argparse
import tempfile

from _common import CONLL, conll_entry, say


def main(argv=None) -> str:
    from layercache.experiments import resolve_entry, run_grid
    from layercache.training import TrainConfig
    from layercache.training.runtime import resolve_precision

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(CONLL))
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args(argv)
    entries = {"CoNLL-2003": conll_entry(args.data),
               "WNUT-16 (built-in)": resolve_entry(model="all-MiniLM-L6-v2", dataset="wnut16", log=say)}
    lines = ["| cache | seed | dev F1 | test F1 |", "|---|---:|---:|---:|"]
    for name, entry in entries.items():
        configs = [TrainConfig(fusion="concat", shots=8, epochs=10, seed=s, precision=resolve_precision("auto"))
                   for s in range(args.seeds)]
        with tempfile.TemporaryDirectory() as tmp:
            records = run_grid(entry, configs, results=f"{tmp}/results.jsonl", workers=0, progress=False, log=say)
        for r in records.values():
            test = "-" if r["test_f1_at_best"] is None else f"{100 * r['test_f1_at_best']:.1f}"
            lines.append(f"| {name} | {r['config']['seed']} | {100 * r['best_dev_f1']:.1f} | {test} |")
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()
