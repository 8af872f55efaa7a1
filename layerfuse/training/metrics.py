"""seqeval's entity micro-F1, vectorised: the same chunks and the same number, without a Python
loop over every tag of every evaluation."""

from __future__ import annotations

import numpy as np


def entity_f1(gold: set, pred: set) -> float:
    """seqeval's micro-F1 (default mode, zero_division=0) from two sets of (type, start, end)."""
    tp = len(gold & pred)
    if tp == 0:
        return 0.0
    p, r = tp / len(pred), tp / len(gold)
    return float(2 * p * r / (p + r))


class Chunker:
    """seqeval's default (conlleval) chunking of tag ids, vectorised.

    seqeval walks the tags one by one and asks ``end_of_chunk(prev, cur)`` and
    ``start_of_chunk(prev, cur)``; both depend only on the (previous, current) pair of tags, so they
    are tabulated once over the label set with seqeval's own functions and looked up for all
    positions at once. Sentences are joined with an ``O`` between them, as seqeval flattens them.
    """

    def __init__(self, label_names):
        from seqeval.metrics.sequence_labeling import end_of_chunk, start_of_chunk

        names = [str(n) for n in label_names] + ["O"]  # the last id: the separator between sentences
        tags = [n[0] for n in names]
        types = [n[1:].split("-", maxsplit=1)[-1] or "_" for n in names]
        K = len(names)
        self.sep = K - 1
        self.types = np.array(types, dtype=object)
        self.ends = np.array([[end_of_chunk(tags[a], tags[b], types[a], types[b]) for b in range(K)] for a in range(K)])
        self.starts = np.array([[start_of_chunk(tags[a], tags[b], types[a], types[b]) for b in range(K)]
                                for a in range(K)])

    def __call__(self, ids: np.ndarray, counts: np.ndarray) -> set:
        """{(type, start, end)} of the flat tag ids of sentences with ``counts`` words each."""
        n = len(counts)
        # a separator after each sentence, + seqeval's final O
        seq = np.full(len(ids) + n + 1, self.sep, dtype=np.int64)
        seq[np.arange(len(ids)) + np.repeat(np.arange(n), counts)] = ids
        prev = np.concatenate([[self.sep], seq[:-1]])
        ends = np.flatnonzero(self.ends[prev, seq])  # a chunk ends at i - 1
        starts = np.flatnonzero(self.starts[prev, seq])  # a chunk starts at i
        last = np.searchsorted(starts, ends, side="left") - 1  # the last start before i (checked before it)
        begins = np.where(last >= 0, starts[np.maximum(last, 0)], 0)
        return set(zip(self.types[prev[ends]].tolist(), begins.tolist(), (ends - 1).tolist()))


def token_accuracy(gold: np.ndarray, pred: np.ndarray) -> float:
    """The share of scored words whose predicted tag is the gold one (token-level label sets: POS,
    UPOS, XPOS, DEPREL); 0 when nothing is scored."""
    gold, pred = np.asarray(gold), np.asarray(pred)
    if gold.shape != pred.shape:
        raise ValueError(f"gold {gold.shape} and predicted {pred.shape} tags differ in shape")
    return float(np.mean(gold == pred)) if gold.size else 0.0
