"""The one shape every dataset format reads into: :class:`TaggedDataset`, words and their tags per
split (span sets in IOB2), with a content fingerprint that never depends on a path.

Why one shape: the extractor, the cache and the heads should not care where sentences came from.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TextIO

from layerfuse.cache.label_sets import SPAN, TOKEN  # IOB2 spans (span F1); word classes (accuracy)
from layerfuse.errors import LayerfuseError

Sentence = tuple[list[str], list[str]]
Extras = dict[str, tuple[str, dict[str, list[list[str]]]]]  # label set -> (kind, raw tags per split and sentence)
# Names users and sources give to splits -> canonical name.
SPLIT_ALIASES = {
    "train": "train",
    "dev": "dev",
    "valid": "dev",
    "validation": "dev",
    "devel": "dev",
    "testa": "dev",
    "test": "test",
    "testb": "test",
}


def open_text(path) -> TextIO:
    """``path`` opened for its lines, each ending at ``\\n`` with any ``\\r`` before it left on the line
    for the reader to strip: Python's universal newlines read ``\\r\\r\\n`` (a file converted to Windows
    endings twice) as a line and a blank one, a sentence break after every token. A file of classic Mac
    endings (``\\r`` alone: no ``\\n`` in its first 64 KiB) is read with universal newlines."""
    with open(path, "rb") as raw:
        head = raw.read(1 << 16)
    return open(path, encoding="utf-8-sig", newline=None if b"\r" in head and b"\n" not in head else "\n")


@dataclass
class LabelColumn:
    """One more label set over the same sentences: its kind, its label names (id order) and its tags
    per split and sentence (span sets in IOB2)."""

    kind: str
    names: list[str]
    tags: dict[str, list[list[str]]]


@dataclass
class TaggedDataset:
    """Sentences per canonical split, all tags in IOB2, plus what the cache key needs.

    ``splits`` carries the primary label set (``primary``: ``ner`` for NER sources, ``upos`` for a UD
    treebank), the one the entry key's fingerprint covers; ``label_sets`` the other columns the
    reader found (CoNLL-2003's ``pos`` and ``chunk``; UD's ``xpos`` and ``deprel``), which never
    change the key: adding one to an entry writes labels only.
    """

    name: str
    source: str
    splits: dict[str, list[Sentence]]
    label_names: list[str]
    unseen_in_train: dict[str, int]
    source_scheme: str = "iob2"  # the tag scheme found in (or given for) the source
    primary: str = "ner"  # the name of the label set in ``splits``
    primary_kind: str = SPAN
    label_sets: dict[str, LabelColumn] = field(default_factory=dict)
    unseen_types: dict[str, list[str]] = field(default_factory=dict)  # the types behind unseen_in_train, per split
    passed_over: list[str] = field(default_factory=list)  # the source's files no split was read from
    _fingerprints: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def fingerprint(self, *, split: str | None = None) -> str:
        """sha256 hex of the content (label names, split names, words, tags), never of paths.

        Without ``split`` it covers every split of the source, even those filtered out by
        ``load_dataset(splits=...)``; ``split`` fingerprints one split alone. Cached per key.
        """
        key = split or ""
        if key not in self._fingerprints:
            names = [split] if split else list(self.splits)
            self._fingerprints[key] = content_hash(self.label_names, {n: self.splits[n] for n in names})
        return self._fingerprints[key]

    @property
    def label_set_names(self) -> list[str]:
        """Every label set: the primary first, then the others in reading order."""
        return [self.primary, *self.label_sets]

    def column(self, name: str) -> LabelColumn:
        """The label set ``name`` as a `LabelColumn` (the primary one included)."""
        if name == self.primary:
            return LabelColumn(self.primary_kind, list(self.label_names),
                               {split: [tags for _, tags in sentences] for split, sentences in self.splits.items()})
        if name not in self.label_sets:
            raise LayerfuseError(f"--labels {name!r}: {self.source} has the label sets "
                                  f"{', '.join(self.label_set_names)}")
        return self.label_sets[name]

    def label_fingerprints(self, name: str, splits=None) -> dict[str, str]:
        """{split: sha256 hex of one label set's names and that split's tags} for every split read (of
        ``splits``, when given), with the words' fingerprint, so a set is never attached to other words.
        Per split, so that reading some splits again (``--splits test``) tells which of a stored set's
        splits it changes."""
        column = self.column(name)
        head = json.dumps({"format": 1, "set": name, "kind": column.kind, "names": column.names,
                           "words": self.fingerprint()}).encode()
        return {split: hashlib.sha256(head + json.dumps({"split": split, "tags": tags}, ensure_ascii=False)
                                      .encode("utf-8")).hexdigest() for split, tags in column.tags.items()
                if splits is None or split in splits}

    @property
    def entity_types(self) -> list[str]:
        """Entity types in label order (each contributes ``B-T`` then ``I-T``); a token-level primary set
        (UPOS) has classes, not types: its labels."""
        if self.primary_kind == TOKEN:
            return list(self.label_names)
        return [label[2:] for label in self.label_names[1::2]]

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={len(v)}" for k, v in self.splits.items())
        return f"TaggedDataset(name={self.name!r}, source={self.source!r}, sentences: {sizes})"



def content_hash(label_names: list[str], splits: dict[str, list[Sentence]]) -> str:
    """Hash a canonical JSON rendering, one line per sentence, so no two contents collide."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"format": 1, "label_names": label_names}).encode() + b"\n")
    for name, sentences in splits.items():
        digest.update(json.dumps({"split": name, "sentences": len(sentences)}).encode() + b"\n")
        for words, tags in sentences:
            digest.update(json.dumps([words, tags], ensure_ascii=False).encode("utf-8") + b"\n")
    return digest.hexdigest()
