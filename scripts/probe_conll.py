"""Per-layer probing on CoNLL-2003 (Tenney et al. 2019; Hewitt and Liang 2019): POS, chunk and NER
over one cache per model, each model extracted once (its three label sets share the hidden states).
For every model: `layerfuse probe` at its defaults on the whole train split (a linear probe per layer
0..L and a ScalarMix probe, control tasks on), several seeds; writes per model
``docs/results/probe_conll/<model>/probe.{jsonl,md,png}`` and one summary,
``docs/results/probe_conll.md``: extraction and probing seconds, each task's expected layers, and the
per-task tables.

    LAYERFUSE_HOME=/tmp/lc python scripts/probe_conll.py [--models all-MiniLM-L6-v2,all-mpnet-base-v2]
        [--seeds 0,1,2] [--data DATA_DIR]

Resumable: a rerun reads each model's probe.jsonl and trains only the probes missing from it.
"""

from __future__ import annotations

import argparse
import os
import time

from _common import CONLL, MODEL, conll_entry, results_path, say, split_list, write_results

from layerfuse.probing import run_probes, write_report

LABEL_SETS = ("pos", "chunk", "ner")  # Tenney et al.'s order: POS lowest, chunks, then entities


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=CONLL, help="CoNLL-2003 directory (four columns: word POS chunk NER)")
    parser.add_argument("--models", default=f"{MODEL},all-mpnet-base-v2")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", default=results_path("probe_conll", ""), help="one folder per model")
    parser.add_argument("--table", default=results_path("probe_conll"), help="the summary ('' = print only)")
    parser.add_argument("--device", default=None)
    args = parser.parse_args(argv)
    seeds = split_list(args.seeds, int)

    sections, summary = [], ["| model | L x d | extraction (s) | probing (s) | probes | task | expected layer "
                             "(scores) | ScalarMix center of gravity |", "|---|---|---:|---:|---:|---|---:|---:|"]
    for model in split_list(args.models):
        entry = conll_entry(args.data, model=model)
        extract_seconds = sum(entry.split(s).attrs.get("seconds", 0.0) for s in entry.splits)
        out = os.path.join(args.out, model)
        say(f"{model}: probing {', '.join(LABEL_SETS)} of {entry.path} -> {out}")
        t0 = time.perf_counter()
        records = run_probes(entry, out=out, label_set_names=LABEL_SETS, seeds=seeds, control=True,
                             device=args.device, progress=True)
        seconds = time.perf_counter() - t0
        probe_seconds = sum(r["seconds"]["train"] for r in records)
        md, png, tasks = write_report(records, out=out, title=f"{model} on CoNLL-2003")
        shape = f"{entry.num_layers} x {entry.dim}"
        for task in tasks:
            summary.append(f"| {model} | {shape} | {extract_seconds:.0f} | {probe_seconds:.0f} | {len(records)} | "
                           f"{task.name} | {_f(task.expected_layer)} | {_f(task.mix.get('center_of_gravity'))} |")
        here = os.path.dirname(args.table) or "."  # named, not linked: pages that include this file live elsewhere
        sections.append(f"## {model}\n\nThe whole report: `{os.path.relpath(md, here)}`, its figure "
                        f"`{os.path.relpath(png, here)}`. This run: {seconds:.0f} s of wall time (probes already in "
                        "probe.jsonl were not retrained).")
    text = ("Linear probes per layer on CoNLL-2003 (train: 14,041 sentences; scores on dev), seeds "
            f"{', '.join(map(str, seeds))}, control tasks on. Extraction: seconds `extract` recorded for "
            "train + dev + test (float16, word rows). Probing: the summed training seconds of every probe "
            "record. Expected layer (scores): sum of l * max(0, s_l - s_(l-1)) over the gains of the "
            "single-layer probes; center of gravity: sum of l * softmax(w)_l of the ScalarMix probe (Tenney "
            "et al. 2019).\n\n" + "\n".join(summary) + "\n\n" + "\n\n".join(sections))
    print(text)
    if args.table:
        write_results(args.table, text, title="Probing CoNLL-2003: POS, chunks and entities per layer",
                      script="probe_conll", argv=argv, device=args.device)
    return text


def _f(value) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
