"""Control tasks (Hewitt and Liang 2019, "Designing and interpreting probes with control tasks").

A control task gives every word *type* one label, drawn at random from the task's empirical label
distribution over the train tokens, and labels every token of that type with it. The control labels
are then a function of word identity alone: a probe that scores well on them has memorised types,
not read the property off the representation. Selectivity = task accuracy - control accuracy; a
good probe is accurate on the task and poor on its control.

Word types are the exact word strings, case included. The encoder sees the exact string (a cased
model tells "Apple" from "apple"), so the exact string is the identity a probe could memorise;
lowercasing would tie the labels of types the representation keeps apart, a different control
from Hewitt and Liang's, whose types are the treebank's word forms as written.

The label of a type is drawn from a hash of (seed, word), not from a generator consumed in some
order: the same type gets the same label in train, dev and test, for types first seen in dev or
test too, whatever splits are labelled and in whatever order, and one seed always gives one task.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..errors import LayerfuseError


def label_distribution(labels: np.ndarray, *, n_classes: int) -> np.ndarray:
    """[n_classes] float64: the share of each label among the scored (non-negative) train labels."""
    labels = np.asarray(labels, dtype=np.int64)
    scored = labels[labels >= 0]
    if scored.size == 0:
        raise LayerfuseError("no scored train labels: a control task needs the task's label distribution")
    if scored.max() >= n_classes:
        raise LayerfuseError(f"label id {int(scored.max())} is out of range for {n_classes} classes")
    counts = np.bincount(scored, minlength=n_classes).astype(np.float64)
    return counts / counts.sum()


def _uniform(words, seed: int) -> np.ndarray:
    """A uniform draw in [0, 1) per word, fixed by (seed, word) alone."""
    out = np.empty(len(words), dtype=np.float64)
    for i, word in enumerate(words):
        digest = hashlib.blake2b(f"{seed}\x00{word}".encode(), digest_size=8).digest()
        out[i] = int.from_bytes(digest, "little") / 2.0**64
    return out


class ControlTask:
    """A seeded control task: ``distribution`` [C] is the task's train label distribution."""

    def __init__(self, distribution: np.ndarray, *, seed: int):
        distribution = np.asarray(distribution, dtype=np.float64)
        if distribution.ndim != 1 or distribution.size == 0 or (distribution < 0).any() or distribution.sum() <= 0:
            raise LayerfuseError(f"a control task needs a label distribution, got {distribution.tolist()}")
        self.distribution = distribution / distribution.sum()
        self.seed = int(seed)
        self._cdf = np.cumsum(self.distribution)

    @classmethod
    def from_train(cls, labels: np.ndarray, *, n_classes: int, seed: int) -> ControlTask:
        """The control task of a label set whose train tokens carry ``labels``."""
        return cls(label_distribution(labels, n_classes=n_classes), seed=seed)

    def type_labels(self, types) -> np.ndarray:
        """The control label (int64) of each word type in ``types``."""
        u = _uniform(list(types), self.seed)
        # Inverse CDF; a label of zero probability is never drawn (side="right" skips its empty interval).
        return np.minimum(np.searchsorted(self._cdf, u, side="right"), len(self._cdf) - 1).astype(np.int64)

    def __call__(self, words, gold: np.ndarray | None = None) -> np.ndarray:
        """Control labels of tokens with word strings ``words``; where ``gold`` is given, its unscored
        (negative) tokens keep their gold value, so the same tokens are scored."""
        words = np.asarray(words, dtype=object)
        types, inverse = np.unique(words.astype(str), return_inverse=True)
        out = self.type_labels(types)[inverse.reshape(-1)]
        if gold is not None:
            gold = np.asarray(gold, dtype=np.int64)
            if gold.shape != out.shape:
                raise LayerfuseError(f"gold labels {gold.shape} and words {out.shape} differ in shape")
            out = np.where(gold < 0, gold, out)
        return out
