"""What a probe reads from a cache entry: the label sets, one set's view, and the scored token rows
of a split with their labels and word strings.

A probe is token-level: sentences matter only for drawing an N-shot sample and for span F1. A row is
scored when its label is non-negative (unscored rows carry -100 or -1); on a subword cache only a
word's first subword is scored, as `train-head` scores it (`layerfuse.training.arrays.sentence_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import LayerfuseError
from ..tasks import task_of
from ..training.arrays import sentence_rows
from ..training.sampling import entity_types, few_shot_sample


def label_sets(entry) -> dict[str, dict]:
    """``{name: {"names": [...], "kind": "span" | "token", ...}}`` of ``entry`` (`CacheEntry.label_sets`;
    an entry from before label sets holds one span set, ``ner``); an MLM entry has none to probe."""
    if not task_of(entry.meta).labels_from_data:
        raise LayerfuseError(f"{entry.path} is a {task_of(entry.meta).name} entry: it has no tag labels to probe")
    return entry.label_sets


def label_view(entry, name: str):
    """The entry seen through label set ``name`` (`CacheEntry.with_labels`: an unknown name is a one-line
    error naming the sets there are)."""
    label_sets(entry)
    return entry.with_labels(name)


def n_way(view) -> int:
    """C of an N-shot sample (N * C sentences) of a label set's view: its entity types for a span set
    (PER, LOC, ...), its classes for a token set (`entity_types` of the view's meta, as `train-head`
    draws its sample, so one seed gives both the same sentences; none, every tag O, is refused there as
    in `train-head`: one was taken for C = 1, another sample than the one it claims to share)."""
    return len(entity_types(view.meta))


def covered_splits(entry, name: str) -> list[str]:
    """The finished splits that label set ``name`` labels (a set added later may not cover every split)."""
    listed = label_sets(entry)[name].get("splits")
    return [s for s in entry.splits if listed is None or s in listed]


def sample_sentences(n_sentences: int, *, shots: int | None, n_types: int, seed: int) -> np.ndarray | None:
    """The train sentences a probe with ``shots`` and ``seed`` sees (None: all, in order), the same
    uniform sample without replacement that `train-head --shots N --seed S` draws."""
    if shots is None:
        return None
    return few_shot_sample(n_sentences, shots=shots, n_types=n_types, seed=seed)


@dataclass
class Tokens:
    """The scored rows of (some sentences of) a split: ``rows`` index the split's rows (what
    `CacheSplit.hidden` reads), ``labels`` [n] their ids, ``words`` [n] their word strings,
    ``counts`` the scored rows per sentence (for span F1)."""

    split: object
    sentences: np.ndarray | None
    rows: np.ndarray
    labels: np.ndarray
    words: np.ndarray
    counts: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    def _read(self, layer: int, dtype) -> np.ndarray:
        values = self.split.hidden(sentences=self.sentences, layers=[layer], dtype=dtype)[:, 0]
        return values if len(self.rows) == len(values) else values[self.rows]  # every row scored: no copy

    def layer(self, layer: int) -> np.ndarray:
        """[n, d] float32: one layer's vectors of the scored rows (one layer in memory)."""
        return self._read(layer, np.float32)

    def layers(self, layers: list[int]) -> np.ndarray:
        """[n, len(layers), d]: every layer of the scored rows, read one layer at a time; float16, or float32
        once a layer holds values past float16's 65504 (a float32, bfloat16 or int8 entry's: the probe was
        refused on them, per-layer probes and all)."""
        out = np.empty((len(self.rows), len(layers), self.split.dim), dtype=np.float16)
        for i, layer in enumerate(layers):
            values = self._read(layer, None)
            if not np.isfinite(values).all():
                raise LayerfuseError(f"layer {layer} of split {self.split.name!r} holds non-finite values "
                                     "(`layerfuse verify` names them)")
            if out.dtype == np.float16 and values.size and np.abs(values).max() > np.finfo(np.float16).max:
                out = out.astype(np.float32)  # the layers read so far, widened exactly
            out[:, i] = values
        return out


def scored_tokens(split, *, sentences=None) -> Tokens:
    """The scored rows of ``sentences`` (None = all) of a `CacheSplit` (a label set's view), with the
    word each row belongs to. Row positions are relative to what ``split.hidden(sentences=...)`` returns."""
    _, offsets, labels = sentence_rows(split, sentences)
    words = row_words(split, sentences, offsets)
    scored = labels >= 0
    before = np.concatenate([[0], np.cumsum(scored)])
    counts = before[offsets[1:]] - before[offsets[:-1]]
    rows = np.flatnonzero(scored)
    return Tokens(split, None if sentences is None else np.asarray(sentences, dtype=np.int64), rows, labels[rows],
                  words[rows], counts.astype(np.int64))


def row_words(split, sentences, offsets: np.ndarray) -> np.ndarray:
    """The word string of every row of ``sentences`` (object [rows]); a subword row carries its
    word's string, a special token's row ``""``."""
    ids = np.arange(split.n_sentences) if sentences is None else np.asarray(sentences, dtype=np.int64)
    per_sentence = split.words(ids)
    lengths = np.diff(offsets)
    group = getattr(split, "group", None)
    out = np.full(int(offsets[-1]), "", dtype=object)
    if group is not None and "word_index" in group:
        word_index = group["word_index"][:][split.rows_of(ids)] if sentences is not None else group["word_index"][:]
        for i, words in enumerate(per_sentence):
            lo, hi = offsets[i], offsets[i + 1]
            wi = word_index[lo:hi]
            ok = wi >= 0
            out[lo:hi][ok] = np.asarray(words, dtype=object)[wi[ok]]
        return out
    if [len(w) for w in per_sentence] != lengths.tolist():
        raise LayerfuseError(f"split {split.name!r}: words per sentence do not match the rows (a subword cache "
                              f"without word_index?)")
    if per_sentence:
        out[:] = [str(w) for words in per_sentence for w in words]
    return out
