"""Few-shot training samples (paper §5): ``N * C`` sentences, uniformly at random, without
replacement and *not* stratified, from the whole train split.

Not stratifying is deliberate: it is the paper's protocol, so a sample of N * C sentences may hold
more or fewer than N mentions of a type. The seed alone fixes the sample, so runs that differ only
in fusion or epoch cap see the same sentences.
"""

from __future__ import annotations

import numpy as np

from layerfuse.errors import LayerfuseError, OptionError
from layerfuse.tasks import task_of


def few_shot_sample(n_train_sentences: int, *, shots: int | str | None, n_types: int, seed: int,
                    split: str = "train", instead: str = "--shots all") -> np.ndarray:
    """Sentence ids (int64, in draw order) of a seeded sample of ``shots * n_types`` sentences.

    ``shots`` None or ``"all"`` returns every sentence in order (``arange``), for full-data runs.
    """
    if n_train_sentences < 0:
        raise LayerfuseError(f"n_train_sentences must be >= 0, got {n_train_sentences!r}")
    if shots is None or shots == "all":
        return np.arange(n_train_sentences, dtype=np.int64)
    if isinstance(shots, bool) or not isinstance(shots, (int, np.integer)) or shots < 1:
        raise OptionError(f"shots must be a positive integer or 'all', got {shots!r}")
    if n_types < 1:  # every tag O: N sentences per type is no sentence at all
        raise LayerfuseError(f"shots={shots}: an N-shot sample draws N sentences per entity type, and this entry's "
                             "tags have none (every tag is O); use --shots all, or check the tag column")
    size = int(shots) * int(n_types)
    if size > n_train_sentences:
        raise OptionError(
            f"shots={shots} x C={n_types} (entity types, or a token set's tags) = {size} sentences, but the {split} "
            f"split has only {n_train_sentences}; use fewer shots or {instead}"
        )
    rng = np.random.default_rng(seed)
    return rng.choice(n_train_sentences, size=size, replace=False).astype(np.int64)


def shot_size(meta: dict) -> int:
    """Sentences per shot of an N-way sample: C, the entity types, for a task whose labels are tag
    classes (NER); otherwise one sequence (MLM: ``shots`` N is N blocks)."""
    return len(entity_types(meta)) if task_of(meta).labels_from_data else 1


def entity_types(meta: dict) -> list[str]:
    """C of an N-way sample: the entry's entity types, else derived from its tag names (B-PER -> PER)."""
    types = meta.get("entity_types")
    if types:
        return list(types)
    return sorted({t.split("-", 1)[1] for t in meta["label_names"] if "-" in t})
