"""`layerfuse rank-layers`: score every cached layer by its variability nu (training-free, seconds), print a
table, and write a JSON record and a PNG plot, so that the layers a head should fuse can be chosen
before any training; with `--shots N --seed S` the score sees only what a few-shot run sees."""

from __future__ import annotations

import os
import time

import click
import numpy as np

from ..files import write_json
from ..layers.scores import score_layers
from ..layers.spec import layers_named
from ..versions import versions
from .errors import NOTHING_TO_RESUME, friendly_errors
from .options import (
    NAME_OR_PATH,
    SEED,
    cache_options,
    default_of,
    labels_option,
    layers_option,
    parse_shots,
    quiet_option,
    resolve,
)


def _name(text: str) -> str:
    """Model and dataset as a reader knows them: a local path shows as its last component."""
    return os.path.basename(str(text).rstrip("/\\")) or str(text)


def _ranks(scores: list[tuple[int, float]]) -> dict[int, int]:
    order = sorted(scores, key=lambda t: (t[1], t[0]))
    return {layer: i + 1 for i, (layer, _) in enumerate(order)}


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@cache_options
@labels_option
@click.option("--split", default="train", show_default=True, help="Split whose tokens are scored.")
@click.option("--shots", default=None, metavar="N|all",
              help="Score only the N*C sentences a few-shot run with this N and --seed trains on (C = the label set's "
                   "entity types, or its word classes for a token set such as POS); "
                   "all (or left out): the whole split, as train-head's --shots all.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the few-shot sample and of the per-tag cap.")
@click.option("--max-per-class", type=click.IntRange(min=1), default=default_of(score_layers, "max_per_class"),
              show_default=True,
              help="Tokens kept per tag (random subsample), so that frequent tags do not dominate.")
@layers_option(default="0..L", extra_help="The layers to score; with auto:K or xie[:K], 1..L are scored and the "
               "layers train-head --layers with that spec would fuse are marked.")
@click.option("--top", type=click.IntRange(min=1), default=3, show_default=True,
              help="Mark this many lowest-nu layers.")
@click.option("--out", type=NAME_OR_PATH, default="runs", show_default=True,
              help="Folder for the JSON record and the PNG plot.")
@quiet_option
@friendly_errors(interrupted=NOTHING_TO_RESUME)
def main(cache, model, dataset, cache_dir, read, labels, split, shots, seed, max_per_class, layers, top, out, quiet):
    """Rank the cached layers by variability nu = tr(Sigma_w Sigma_b^+)/C (lower = better)."""
    from ..experiments.plots import plot_scores
    from ..layers import parse_layers, pick_layers
    from ..training.sampling import entity_types, few_shot_sample
    from .roots import checked_out

    shots = parse_shots(shots)  # `all` as train-head and sweep take it
    out = checked_out(out)  # a file or a read-only folder: one line before the scores, not a bare "File exists" after
    entry = resolve(cache, model, dataset, cache_dir, read=read, quiet=quiet).with_labels(labels)
    is_primary = labels is None or labels == next(iter(entry.label_sets))
    data = entry.split(split)
    spec_text, spec = layers, parse_layers(layers, num_layers=entry.num_layers)
    layers = list(spec.candidates)
    sentences = None
    if shots is not None:  # the same sample train-head draws for --shots/--seed
        sentences = few_shot_sample(data.n_sentences, shots=shots, n_types=len(entity_types(entry.meta)), seed=seed,
                                    split=split, instead="leave --shots out (the whole split)")
    t0 = time.perf_counter()
    scores = score_layers(data, sentences=sentences, layers=layers, max_per_class=max_per_class, seed=seed)
    seconds = time.perf_counter() - t0

    labels = data.labels if sentences is None else data.labels[data.rows_of(sentences)]
    counts = np.bincount(labels[labels >= 0], minlength=len(entry.label_names))
    tag_counts = {name: int(n) for name, n in zip(entry.label_names, counts) if n}
    # The marked layers are the ones `train-head --layers auto:K` would fuse: picked from auto's own candidates
    # (1..L), so the embedding output (layer 0) is scored and ranked but never marked best.
    picks_from = parse_layers("auto:1", num_layers=entry.num_layers).candidates
    pool = [s for s in scores if s[0] in picks_from] or scores
    best = list(spec.fused(scores)) if spec.k else pick_layers(pool, min(top, len(pool)))
    ranks = _ranks(scores)
    model_name, dataset_name = _name(entry.meta.get("model", "?")), _name(entry.meta.get("dataset", "?"))
    seed_set = shots is None and seed != _default("seed")  # it draws the tokens kept per tag, too
    setting = f"{split}" + (f", N={shots} seed {seed}" if shots is not None else f", seed {seed}" if seed_set else "")
    n_sent = data.n_sentences if sentences is None else len(sentences)

    click.echo(f"{model_name} on {dataset_name} ({setting}): {n_sent:,} sentences, {len(labels):,} tokens, "
               f"{len(tag_counts)} tags, <= {max_per_class} tokens per tag")
    click.echo(f"{'layer':>5}  {'nu':>12}  {'rank':>4}")
    for layer, nu in scores:
        click.echo(f"{layer:>5}  {nu:>#12.5g}  {ranks[layer]:>4}{'  *' if layer in best else ''}")
    unmarked = " (of 1..L: auto:K never fuses layer 0)" if len(pool) < len(scores) else ""
    click.echo(f"best {len(best)}{unmarked}: {', '.join(map(str, best))}   ({seconds:.2f} s)")

    key = entry.meta.get("key") or _name(entry.path)
    named = "" if is_primary else f"-{entry.meta['label_set']}"  # the primary set's files keep their names
    stem = os.path.join(out, f"rank-layers-{key}{named}-{split}" + (f"-n{shots}-s{seed}" if shots is not None else "")
                        + _settings_named({"layers": spec_text, "top": top, "max_per_class": max_per_class,
                                           **({"seed": seed} if shots is None else {})}))
    os.makedirs(out, exist_ok=True)
    record = {
        "command": "rank-layers",
        "scores": [{"layer": layer, "nu": nu if np.isfinite(nu) else None, "rank": ranks[layer]}
                   for layer, nu in scores],
        "best": best,
        "params": {"split": split, "shots": shots, "seed": seed, "max_per_class": max_per_class,
                   "layers": layers, "layer_spec": spec_text, "top": top,
                   "labels": entry.meta["label_set"]},
        "cache": {"path": entry.path, "key": key, "model": entry.meta.get("model"),
                  "dataset": entry.meta.get("dataset")},
        "n_sentences": n_sent,
        "n_tokens": int(len(labels)),
        "tag_counts": tag_counts,
        "sentences": None if sentences is None else [int(s) for s in sentences],
        "seconds": round(seconds, 4),
        "versions": versions(),
    }
    write_json(stem + ".json", record)  # whole, or an error naming it
    plot_scores(scores, title=f"{model_name} on {dataset_name} ({setting})", path=stem + ".png")
    click.echo(f"wrote {stem}.json and {stem}.png")


# How a setting away from its default shows in the files' name, so that a rerun with another one writes
# beside the first, never over it (the defaults keep the names they always had).
NAME_PARTS = {"layers": "l", "top": "top", "max_per_class": "cap", "seed": "s"}


def _default(name: str):
    return next(p.default for p in click.get_current_context().command.params if p.name == name)


def _settings_named(settings: dict) -> str:
    """``-l1.6-top2`` for the settings of ``settings`` given away from this command's defaults; '' for none."""
    return "".join(f"-{NAME_PARTS[name]}" + layers_named(str(value))
                   for name, value in settings.items() if value != _default(name))


if __name__ == "__main__":
    main()
