"""The paper's Table 3 on layerfuse's built-in corpus: masked-token perplexity of Base, +n layers,
Concat and DWAtt (the paper's score and the scaled one), trained FE (from the MLM cache) and FT
(the backbone fine-tuned end to end with the head), mean ± 95% CI over seeds.

Data: `extract --task mlm --dataset wiki-offline` (English Wikipedia lead sections, blocks of 128
subwords, 15% of tokens masked once and stored; extracted first when missing). Every run trains
on the same number of train blocks (--blocks, a seeded sample), batch 8 (the paper's), for
--epochs epochs; FT at the paper's lr 5e-5 with train masks redrawn each epoch, FE at layerfuse's
per-head defaults. Dev perplexity is scored at the end of every epoch on all dev blocks; the table
reports the best dev perplexity and the test perplexity of the head at that point, both on the
cache's fixed masks (the same positions in FE and FT). The reference lines: the backbone with the
LM head before any training (`--epochs 0`), and a uniform guess over the vocabulary.

    python scripts/mlm_table.py                               # MiniLM, 5 heads x FE, FT x 3 seeds
    python scripts/mlm_table.py --modes fe --seeds 1 --blocks 64 --epochs 1
"""

from __future__ import annotations

import argparse
import os
import statistics

from _common import REPO, dev_line, results_path, say, split_list, write_results

HEADS = {"base": {}, "extra": {}, "concat": {}, "dwatt": {"layer_score": "scaled"},
         "dwatt (paper's score)": {"layer_score": "paper"}}


def configs_of(args, mode: str) -> list:
    from layerfuse.training import TrainConfig
    from layerfuse.training.runtime import resolve_precision

    precision = resolve_precision("auto")
    return [TrainConfig(task="mlm", mode=mode, fusion=head.split()[0], shots=args.blocks, epochs=args.epochs,
                        seed=seed, batch_size=8, precision=precision, **HEADS[head])
            for head in HEADS for seed in range(args.seeds)]


def head_of(record: dict) -> str:
    c = record["config"]
    return "dwatt (paper's score)" if c["fusion"] == "dwatt" and c["layer_score"] == "paper" else c["fusion"]


def cell(values: list[float]) -> str:
    from layerfuse.experiments.report import ci95

    if not values:
        return "-"
    mean, half = ci95(values)
    return f"{mean:,.1f} ± {half:,.1f}"


def table(records: dict, heads: list[str], reference: dict, vocab: int) -> str:
    lines = ["| head | FE dev ppl | FE test ppl | FT dev ppl | FT test ppl | trainable params (FE) |",
             "|---|---:|---:|---:|---:|---:|"]
    for head in heads:
        fe = [r for r in records.get("fe", []) if head_of(r) == head]
        ft = [r for r in records.get("ft", []) if head_of(r) == head]
        params = f"{fe[0]['params']:,}" if fe else "-"
        lines.append(f"| {head} | {cell([r['best_dev_ppl'] for r in fe])} "
                     f"| {cell([r['test_ppl_at_best'] for r in fe])} "
                     f"| {cell([r['best_dev_ppl'] for r in ft])} | {cell([r['test_ppl_at_best'] for r in ft])} "
                     f"| {params} |")
    lines.append(f"| reference: backbone + LM head before training (`--epochs 0`) | {reference['best_dev_ppl']:,.1f} "
                 f"| {reference['test_ppl_at_best']:,.1f} | | | |")
    lines.append(f"| reference: uniform over the vocabulary | {vocab:,} | {vocab:,} | | | |")
    return "\n".join(lines)


def main(argv=None) -> str:
    from dataclasses import replace

    from layerfuse.experiments import load_cached, load_live, resolve_entry, run_grid

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="all-MiniLM-L6-v2")
    p.add_argument("--dataset", default="wiki-offline")
    p.add_argument("--modes", default="fe,ft")
    p.add_argument("--blocks", type=int, default=256, help="train blocks per run (a seeded sample)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--out", default=str(REPO / "runs" / "mlm_table"))
    p.add_argument("--table", default=results_path("mlm_table"), help="markdown file written ('' = print only)")
    args = p.parse_args(argv)
    entry = resolve_entry(model=args.model, dataset=args.dataset, extract_options={"task": "mlm"}, log=say)
    os.makedirs(args.out, exist_ok=True)
    records = {}
    loaders = {"fe": load_cached, "ft": load_live}
    for mode in split_list(args.modes):
        configs = configs_of(args, mode)
        results = os.path.join(args.out, f"{args.model}-{mode}.jsonl")
        records[mode] = list(run_grid(entry, configs, results=results, load=loaders[mode], log=say).values())
    base = configs_of(args, "fe")[0]
    (reference,) = run_grid(entry, [replace(base, fusion="base", epochs=0)], workers=0, log=say,
                            results=os.path.join(args.out, f"{args.model}-reference.jsonl")).values()
    first = next(iter(records.values()))[0]
    text = (f"{args.model} on {entry.meta['dataset']} ({entry.split('train').n_sentences:,} train, "
            f"{entry.split('dev').n_sentences:,} dev, {entry.split('test').n_sentences:,} test blocks of "
            f"{entry.meta['block_size']} subwords; {entry.meta['mlm_probability']:.0%} masked). {args.blocks} train "
            f"blocks per run, batch 8, {args.epochs} epochs, seeds 0..{args.seeds - 1}, precision "
            f"{first['config']['precision']}; FE at layerfuse's per-head learning rates, FT at 5e-5. Best dev "
            f"perplexity and the test perplexity at that point, mean ± 95% CI over seeds. Median seconds per run: "
            + ", ".join(f"{m.upper()} {statistics.median(r['seconds']['total'] for r in rs):.0f}"
                        for m, rs in records.items())
            + ".\n\n" + table(records, HEADS, reference, int(entry.meta["vocab_size"])))
    print(text)
    if args.table:
        write_results(args.table, text, title="Masked language modelling (paper Table 3)", script="mlm_table",
                      argv=argv, dev=dev_line(None, entry.split("dev").n_sentences).replace("sentences", "blocks"))
    return text


if __name__ == "__main__":
    main()
