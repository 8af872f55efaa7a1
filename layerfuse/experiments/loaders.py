"""What a grid's executors load once before their runs: ``load(entry, configs) -> data`` (or, with
``run_grid(load_per_run=True)``, before each run: ``load(entry, [config])``).

Loaders are top-level functions, so worker processes and Ray tasks can be handed them by name.
"""

from __future__ import annotations

import numpy as np

from ..errors import LayerfuseError, OptionError
from ..layers import parse_layers
from ..tasks import task_of
from ..training.data import load_data, load_for_run
from ..training.sampling import few_shot_sample, shot_size


def load_cached(entry, configs: list) -> object:
    """FE: the union of the runs' few-shot samples (all of train if a run uses it all) with the
    union of their candidate layers, and dev/test with those layers: one cache read."""
    entry = with_labels(entry, configs)
    layers = _candidate_layers(entry, configs)
    sentences = None
    if configs and all(c.shots is not None for c in configs):
        n_train, n_types = entry.split("train").n_sentences, shot_size(entry.meta)
        sentences = np.unique(np.concatenate([few_shot_sample(n_train, shots=c.shots, n_types=n_types, seed=c.seed)
                                              for c in configs]))
    return load_data(entry, layers=layers or None, train_sentences=sentences)


def check_dev_subset(entry, configs: list) -> None:
    """A --dev-sentences as large as dev or larger, refused in one line: its runs would evaluate on all of dev while
    their records and the report said a subset (and took other run ids than the same runs on dev). (MLM counts
    dev in blocks, which the entry's split does not hold: its runs are left to their loop.)"""
    asked = max((c.dev_sentences for c in configs if c.dev_sentences and task_of(c).labels_from_data), default=None)
    if not asked or "dev" not in entry.splits:
        return
    n_dev = entry.split("dev").n_sentences
    if asked >= n_dev:
        raise OptionError(f"--dev-sentences {asked}: dev has {n_dev:,} sentences; leave it out to evaluate "
                          "on all of dev")


def check_dev_entities(entry, configs: list) -> None:
    """A span label set (NER, chunks) whose dev split, or the --dev-sentences subset the runs score on, holds no
    entity, refused in one line before any run: its F1 is 0 whatever a head tags (undefined: no gold entity),
    so no evaluation can be chosen as best (the first one was, and its 0.0 reported as a score). Token label
    sets (accuracy) and MLM have nothing to check. Reads dev's tags alone."""
    from ..cache.label_sets import SPAN
    from ..training.arrays import IGNORE, sentence_rows
    from ..training.loop import dev_subset
    from ..training.metrics import Chunker

    runs = [c for c in configs if task_of(c).labels_from_data]
    if not runs or not task_of(entry.meta).labels_from_data or "dev" not in entry.splits:
        return  # an MLM entry's labels are token ids: a run of another task on it is refused by its loop
    entry = with_labels(entry, runs)
    if entry.meta.get("label_kind", SPAN) != SPAN:
        return
    dev, chunker = entry.split("dev"), Chunker(entry.label_names)
    for size in sorted({c.dev_sentences if c.dev_sentences and c.dev_sentences < dev.n_sentences else 0
                        for c in runs}):
        _, offsets, labels = sentence_rows(dev, dev_subset(dev.n_sentences, size) if size else None)
        scored = np.concatenate([[0], np.cumsum(labels != IGNORE)])
        if not chunker(labels[labels != IGNORE], scored[offsets[1:]] - scored[offsets[:-1]]):
            what = f"the --dev-sentences {size} subset of dev" if size else "the dev split"
            raise LayerfuseError(f"{what} of {entry.path} holds no {entry.meta.get('label_set') or 'ner'} entity: "
                                 "its F1 is undefined, so no evaluation can be chosen as best; give a dev split "
                                 "with entities" + (" or a larger --dev-sentences" if size else ""))


def check_samples(entry, configs: list) -> None:
    """Raise the `few_shot_sample` error of the first N whose sample does not fit the train split, before
    any run or worker starts (in a worker it would surface only as a broken pool)."""
    shots = sorted({c.shots for c in configs if c.shots is not None}, key=str)
    if not shots or "train" not in entry.splits:
        return
    entry = with_labels(entry, configs)
    n_train, n_types = entry.split("train").n_sentences, shot_size(entry.meta)
    for n in shots:
        few_shot_sample(n_train, shots=n, n_types=n_types, seed=0)


def check_warmups(entry, configs: list) -> None:
    """A warmup not shorter than its run, refused before any run starts and naming every such run (the
    run's own refusal, `lr_schedule`, stopped a grid at its first short run, mid-grid with workers)."""
    warmed = [c for c in configs if c.warmup]
    if not warmed or "train" not in entry.splits:
        return
    entry = with_labels(entry, warmed)
    n_train, n_types = entry.split("train").n_sentences, shot_size(entry.meta)
    short = [c for c in warmed if 0 < steps_of(c, n_train, n_types) <= c.warmup]
    if short:
        named = ", ".join(f"{c.fusion} N={c.shots or 'all'} {c.epochs} epochs ({steps_of(c, n_train, n_types)} steps)"
                          for c in short[:4]) + (f" and {len(short) - 4} more" if len(short) > 4 else "")
        raise OptionError(f"warmup {short[0].warmup} is not shorter than the run of {named}: no step would "
                          "decay the rate; use a shorter warmup, or leave those runs out")


def steps_of(config, n_train: int, n_types: int) -> int:
    """A run's optimizer steps, as its loop counts them: epochs x ceil(sentences / (batch x accumulation))."""
    n = n_train if config.shots is None else config.shots * n_types
    return config.epochs * -(-n // (config.batch_size * config.grad_accum))


def load_run(entry, configs: list) -> object:
    """FE, one run (``load_per_run``): exactly what it reads, its sample with its candidate layers
    (all of 1..L for auto:K, to rank them) and dev/test with only the layers it fuses."""
    (config,) = configs
    return load_for_run(with_labels(entry, configs), layers=config.layers, shots=config.shots, seed=config.seed,
                        query_layers=config.query_layers(entry.num_layers))


def load_live(entry, configs: list) -> object:
    """FT: the words and tags of every split around the live backbone, loaded once (every run
    starts again from its pretrained weights)."""
    from ..finetune.data import check_live, live_data
    from ..finetune.live import load_live_backbone
    from ..training.runtime import pick_device

    entry = with_labels(entry, configs)
    check_live(entry)
    device = pick_device(configs[0].device if configs else None)
    backbone = load_live_backbone(entry.meta, device=device)
    return live_data(entry, backbone, layers=_candidate_layers(entry, configs) or range(1, entry.num_layers + 1))


def with_labels(entry, configs: list):
    """The entry seen through the runs' label set (one per grid: records of one results file compare
    like with like)."""
    names = {getattr(c, "labels", None) for c in configs}
    if len(names) > 1:
        raise LayerfuseError(f"one grid trains one label set, got {', '.join(map(str, sorted(names, key=str)))}")
    return entry.with_labels(names.pop() if names else None)


def _candidate_layers(entry, configs: list) -> list[int]:
    """The union of the layers the runs may fuse (auto:K ranks all of 1..L) or read as z_L."""
    return sorted({x for c in configs for x in (*parse_layers(c.layers, num_layers=entry.num_layers).candidates,
                                                   *c.query_layers(entry.num_layers))})
