"""One activation store per process: the splits read from the cache, kept for every later run.

A sweep worker, a pack, a script that calls `train_head` in a loop or `load_data` twice: each asks
for the same few splits (dev and test with the fused layers, the train sentences of its samples)
again and again. The store answers a repeated request from what it already holds, so a second run
in the same process reads no hidden states from the cache. A request for fewer layers of a held
split is a view of it (`take_layers`), not a read.

A split (`arrays.SplitArrays`) is held (storage dtype, moved once to the compute device when a batch
first needs it) when it fits `budget.memory_budget` (read from the device), else streamed, holding
only its bookkeeping: the store's choice, not its callers'. What the store keeps is bounded by the
same budget, read when the store was first used: the least recently used splits are let go first.
Streamed splits are not kept: opening one again reads its bookkeeping alone, and one kept held its
entry open (a descriptor and a read lock each) for the life of the process.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from . import budget

_HELD: OrderedDict = OrderedDict()  # key -> Split, least recently used first
_LIMIT: list[int] = []  # the byte budget the store keeps within, read once


def open_split(split, *, sentences, layers: Sequence[int]):
    """``sentences`` (None = all) of a `CacheSplit` with ``layers``: from the store when it holds them
    (or a superset of the layers of the same sentences), else read (held or streamed) and kept."""
    layers = tuple(int(x) for x in layers)
    where = _where(split, sentences)
    found = _HELD.get((*where, layers))
    if found is None:
        found = _superset(where, layers)
    if found is not None:
        _HELD.move_to_end((*where, found.layers))
        return found.take_layers(layers)
    opened = _read(split, sentences=sentences, layers=layers)
    if not opened.streamed:  # a streamed split costs no read of hidden states to open again, and it holds
        _keep((*where, layers), opened)  # its entry open: kept, each run's added one, and one more descriptor
    return opened


def clear() -> None:
    """Let go of every split the store holds (and read the memory budget again at its next use). The store
    keeps them for the life of the process, after the runs and data that read them are gone: a host process
    done with a cache (a notebook between experiments) calls this (`layerfuse.training.clear_store`) to
    give their memory back. A split that live data (a `HeadData`) still references is freed with that data.
    The pinned host buffers that stage streamed blocks for a GPU (`staging`) go too."""
    from . import staging

    _HELD.clear()
    _LIMIT.clear()
    staging.release()


def held_bytes() -> int:
    """Bytes of hidden states the store holds (streamed splits hold none)."""
    return sum(s.nbytes for s in _HELD.values())


def _where(split, sentences) -> tuple:
    """What identifies a split's rows: the entry (and when it was made: a path removed and extracted
    again is another entry), its label set, the split, the sentences."""
    if sentences is None:
        picked = "all"
    else:
        picked = hashlib.sha1(np.asarray(sentences, dtype=np.int64).tobytes()).hexdigest()
    entry = split.entry
    return (entry.path, entry.stored_meta.get("created"), entry.labels_array, split.name, picked)


def _superset(where: tuple, layers: tuple[int, ...]):
    for key, held in reversed(_HELD.items()):
        if key[:-1] == where and set(layers) <= set(held.layers):
            return held
    return None


def _read(split, *, sentences, layers: tuple[int, ...]):
    from .arrays import SplitArrays, load_split, sentence_rows

    if sentences is None:
        rows = split.n_rows
    else:
        ids = np.asarray(sentences, dtype=np.int64)
        rows = int((split.offsets[ids + 1] - split.offsets[ids]).sum())
    if split.stored_nbytes(rows=rows, layers=len(layers)) <= budget.memory_budget():
        return load_split(split, sentences=sentences, layers=layers)
    ids, offsets, labels = sentence_rows(split, sentences)
    return SplitArrays(split.name, None, labels, offsets, layers, ids, split.offsets[ids].astype(np.int64),
                       storage=split.storage, source=split)  # streamed


def _keep(key: tuple, opened) -> None:
    if not _LIMIT:
        _LIMIT.append(budget.memory_budget())
    _HELD[key] = opened
    while len(_HELD) > 1 and held_bytes() > _LIMIT[0]:
        _HELD.popitem(last=False)  # the least recently used; runs that still use it keep their reference
