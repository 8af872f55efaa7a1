"""The nu profile of all-MiniLM-L6-v2 on CoNLL-2003 train: the full split against the few-shot
samples (N = 8 and N = 128: N x C sentences drawn at random, C entity types; 3 seeds each) that
train-head would see, to check whether the layer ranking survives scarce data. Prints a markdown table (layer x setting)
with the layers `--layers auto:3` and `--layers xie` would pick from each column, writes it to --table
(docs/results/rank_layers_conll.md) and the figure beside it (--plot, docs/results/rank_layers_conll.png).
Layer 0 (the embeddings) is scored and kept in the table, marked, but it is no candidate of
`auto:K` or `xie`, which pick from 1..L, so the figure draws layers 1..L only.

    LAYERFUSE_HOME=/tmp/lc python scripts/rank_layers_conll.py --data PATH/conll2003
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from _common import CONLL, conll_entry, publish, results_path, say

from layerfuse.experiments.plots import plot_scores
from layerfuse.layers import pick_layers
from layerfuse.layers.scores import score_layers
from layerfuse.training.sampling import entity_types, few_shot_sample

SEEDS = (0, 1, 2)
SHOTS = (8, 128)
K = 3  # the auto:K of the table's pick row (the depth study's auto:3)


def candidates(run: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The scores of layers 1..L: what `--layers auto:K` and `--layers xie` pick from (never layer 0)."""
    return [(layer, nu) for layer, nu in run if layer > 0]


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=CONLL, help="CoNLL-2003 directory")
    parser.add_argument("--table", default=results_path("rank_layers_conll"),
                        help="markdown file written ('' = print only)")
    parser.add_argument("--plot", default=results_path("rank_layers_conll", ".png"))
    args = parser.parse_args(argv)

    entry = conll_entry(args.data)
    train = entry.split("train")
    n_types = len(entity_types(entry.meta))
    say(f"cache {entry.path}")

    runs: dict[str, list[list[tuple[int, float]]]] = {}
    t0 = time.perf_counter()
    runs["full train"] = [score_layers(train)]
    timings = [f"full train: {time.perf_counter() - t0:.2f} s"]
    for shots in SHOTS:
        key = f"N={shots}"
        for seed in SEEDS:
            t0 = time.perf_counter()
            sample = few_shot_sample(train.n_sentences, shots=shots, n_types=n_types, seed=seed)
            runs.setdefault(key, []).append(score_layers(train, sentences=sample, seed=seed))
            seconds = time.perf_counter() - t0
            timings.append(f"{key} seed {seed}: {len(train.rows_of(sample)):,} tokens, {seconds:.2f} s")

    columns = [("full train", runs["full train"][0])]
    columns += [(f"N={s} s{seed}", run) for s in SHOTS for seed, run in zip(SEEDS, runs[f"N={s}"])]
    layers = [layer for layer, _ in columns[0][1]]
    lines = [f"nu per layer (lower = better) of {entry.meta.get('model')} on CoNLL-2003 train "
             f"({train.n_sentences:,} sentences, {train.n_rows:,} tokens, {n_types} entity types) and on few-shot "
             f"samples (N x C sentences drawn at random, C = {n_types} entity types; seeds "
             f"{', '.join(map(str, SEEDS))}); time to score: "
             + "; ".join(timings) + ".", "",
             "| layer | " + " | ".join(name for name, _ in columns) + " |",
             "|---:|" + "---:|" * len(columns)]
    for i, layer in enumerate(layers):
        name = f"{layer} (embeddings, not a candidate)" if layer == 0 else str(layer)
        lines.append(f"| {name} | " + " | ".join(f"{run[i][1]:.4g}" for _, run in columns) + " |")
    lines.append(f"| auto:{K} pick (of 1..L) | "
                 + " | ".join(",".join(map(str, pick_layers(candidates(run), K))) for _, run in columns) + " |")
    lines.append("| xie pick (lowest nu of 1..L) | "
                 + " | ".join(str(pick_layers(candidates(run), 1)[0]) for _, run in columns) + " |")

    title = (f"{entry.meta.get('model')} on CoNLL-2003 train, layers 1..L (the candidates of auto:K and xie); "
             f"N x C sentences drawn at random, {len(SEEDS)} seeds (band: min-max)")
    plot_scores({name: [candidates(run) for run in seeds] for name, seeds in runs.items()}, title=title,
                path=args.plot)
    lines += ["", f"Figure: {os.path.basename(args.plot)} (beside this file)."]
    text = "\n".join(lines)
    say(f"wrote {args.plot} ({Path(args.plot).stat().st_size / 1024:.0f} KiB)")
    return publish(args.table, text, title="Which layers? nu per layer on CoNLL-2003", script="rank_layers_conll",
                   argv=argv)


if __name__ == "__main__":
    main()
