"""Layer variability straight from a cache split, one layer in memory at a time.

A full split holds every layer ([rows, L + 1, d]); loading it whole to score layers would cost
L + 1 times the memory that scoring needs. Here each layer is read as its own slice, the same
per-class token subsample is applied to every layer, and only that layer's [rows, d] is alive.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import LayerfuseError
from .variability import rank_layers

__all__ = ["score_layers"]


def score_layers(
    split,
    *,
    sentences: Sequence[int] | np.ndarray | None = None,
    layers: Sequence[int] | None = None,
    max_per_class: int | None = 2000,
    seed: int = 0,
) -> list[tuple[int, float]]:
    """``[(layer, nu), ...]`` in ``layers`` order (default: every stored layer 0..L, 0 = embeddings)
    for a ``CacheSplit``, over the tokens of ``sentences`` (default: the whole split; any order, the same
    scores).

    Labels are the split's per-row tag ids; each tag is capped at ``max_per_class`` tokens
    (subsample seeded by ``seed``) so that ``O`` does not drown the entity tags. Equal to
    ``rank_layers`` on the fully loaded ``split.hidden(sentences=...)``, without loading it.
    """
    n_stored = split.entry.num_layers + 1
    layers = list(range(n_stored)) if layers is None else [int(x) for x in layers]
    if not layers:
        raise LayerfuseError(f"no layers to score; name at least one of 0..{n_stored - 1}")
    bad = [x for x in layers if not 0 <= x < n_stored]
    if bad:
        raise LayerfuseError(f"layers {bad} out of range: {split.entry.path} stores layers 0..{n_stored - 1}")
    if sentences is None:
        labels = split.labels
    else:
        # Sorted: the per-tag cap draws token positions, so the draw order of a sample would change which
        # tokens it keeps; train-head's --layers auto:K scores its sample sorted (`choose_layers`) too.
        sentences = np.sort(np.asarray(sentences, dtype=np.int64))
        labels = split.labels[split.rows_of(sentences)]

    def one_layer(layer: int) -> np.ndarray:  # [rows, d], the only layer in memory
        return split.hidden(sentences=sentences, layers=[layer])[:, 0, :]

    return rank_layers(one_layer, labels, layer_ids=layers, max_per_class=max_per_class, seed=seed)
