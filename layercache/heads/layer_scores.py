"""Layer variability straight from a cache split, one layer in memory at a time.

A full split holds every layer ([rows, L + 1, d]); loading it whole to score layers would cost
L + 1 times the memory that scoring needs. Here each layer is read as its own slice, the same
per-class token subsample is applied to every layer, and only that layer's [rows, d] is alive.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import LayercacheError
from .variability import rank_layers

__all__ = ["score_layers", "parse_layers"]


def score_layers(
    split,
    *,
    sentences: Sequence[int] | np.ndarray | None = None,
    layers: Sequence[int] | None = None,
    max_per_class: int | None = 2000,
    seed: int = 0,
) -> list[tuple[int, float]]:
    """``[(layer, nu), ...]`` in ``layers`` order (default: every stored layer 0..L, 0 = embeddings)
    for a ``CacheSplit``, over the tokens of ``sentences`` (default: the whole split).

    Labels are the split's per-row tag ids; each tag is capped at ``max_per_class`` tokens
    (subsample seeded by ``seed``) so that ``O`` does not drown the entity tags. Equal to
    ``rank_layers`` on the fully loaded ``split.hidden(sentences=...)``, without loading it.
    """
    n_stored = split.entry.num_layers + 1
    layers = list(range(n_stored)) if layers is None else [int(x) for x in layers]
    if not layers:
        raise LayercacheError("no layers to score; name at least one of 0..{}".format(n_stored - 1))
    bad = [x for x in layers if not 0 <= x < n_stored]
    if bad:
        raise LayercacheError(f"layers {bad} out of range: {split.entry.path} stores layers 0..{n_stored - 1}")
    if sentences is None:
        labels = split.labels
    else:
        sentences = np.asarray(sentences, dtype=np.int64)
        labels = split.labels[split.rows_of(sentences)]

    def one_layer(layer: int) -> np.ndarray:  # [rows, d], the only layer in memory
        return split.hidden(sentences=sentences, layers=[layer])[:, 0, :]

    return rank_layers(one_layer, labels, layer_ids=layers, max_per_class=max_per_class, seed=seed)


def parse_layers(spec: str | None, *, n_stored: int) -> list[int]:
    """Layer ids from a CLI spec: ``all`` (or empty), ``2``, ``1,3,5``, ``0..6``, ``1-3,6`` (ranges
    inclusive), checked against the ``n_stored`` layers of the cache (0 = embeddings)."""
    if spec is None or spec.strip().lower() in ("", "all"):
        return list(range(n_stored))
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("..") if ".." in part else part.partition("-")
        try:
            ids = range(int(lo), int(hi) + 1) if sep else [int(part)]
        except ValueError:
            raise LayercacheError(f"bad layer spec {spec!r} at {part!r}: use all, 3, 1,3,5 or 0..6") from None
        if sep and int(lo) > int(hi):
            raise LayercacheError(f"bad layer range {part!r} in {spec!r}: start is after end")
        out.extend(x for x in ids if x not in out)
    bad = [x for x in out if not 0 <= x < n_stored]
    if bad:
        raise LayercacheError(f"layers {bad} in {spec!r} out of range: the cache stores layers 0..{n_stored - 1}")
    return out
