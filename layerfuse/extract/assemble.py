"""From a format's raw splits to a :class:`TaggedDataset`: one tag scheme detected over the whole
dataset and normalised to IOB2, label names over every split (so ids never depend on a split filter),
the tokens of types (or word classes) unseen in train counted, the requested splits kept."""

from __future__ import annotations

from collections import Counter

from layerfuse.cache.label_sets import SPAN
from layerfuse.cache.layout import SPLIT_ORDER
from layerfuse.errors import LayerfuseError, OptionError
from layerfuse.extract.iob import detect_scheme, normalise_scheme, to_iob2
from layerfuse.extract.tagged import (
    SPLIT_ALIASES,
    Extras,
    LabelColumn,
    Sentence,
    TaggedDataset,
    content_hash,
)


def ordered(raw: dict[str, list[Sentence]]) -> dict[str, list[Sentence]]:
    """train, dev, test first, then any other split names sorted."""
    keys = [s for s in SPLIT_ORDER if s in raw] + sorted(s for s in raw if s not in SPLIT_ORDER)
    return {k: raw[k] for k in keys}


def _label_names(splits: dict[str, list[Sentence]]) -> list[str]:
    """``O``, then ``B-T``, ``I-T`` for each entity type T in alphabetical order."""
    tags_all = (tag for sentences in splits.values() for _, tags in sentences for tag in tags)
    types = sorted({tag[2:] for tag in tags_all if tag != "O"})
    return ["O"] + [f"{p}-{t}" for t in types for p in ("B", "I")]


def _unseen_in_train(splits: dict[str, list[Sentence]]) -> dict[str, Counter]:
    """Per non-train split, the tokens of each entity type that never occurs in train (kept, only counted)."""
    seen = {tag[2:] for _, tags in splits["train"] for tag in tags if tag != "O"}
    return {
        split: Counter(tag[2:] for _, tags in sentences for tag in tags if tag != "O" and tag[2:] not in seen)
        for split, sentences in splits.items()
        if split != "train"
    }


def unseen_classes(splits: dict[str, list[Sentence]]) -> dict[str, Counter]:
    """Per non-train split, the tokens of each word class (a token set's tag: POS) that never occurs in
    train (kept, only counted): a head cannot learn to predict them."""
    seen = {tag for _, tags in splits["train"] for tag in tags}
    return {split: Counter(tag for _, tags in sentences for tag in tags if tag not in seen)
            for split, sentences in splits.items() if split != "train"}


def class_names(tag_lists) -> list[str]:
    """The sorted distinct labels of a token-level set (over every split, so ids never depend on a filter)."""
    return sorted({tag for sentences in tag_lists for tags in sentences for tag in tags})


def _label_column(kind: str, raw: dict[str, list[list[str]]]) -> LabelColumn:
    """A label set from raw tags: span sets normalised to IOB2 (scheme detected over the set), names
    and tags over every split read, like the primary set's names."""
    if kind == SPAN:
        distinct = {tuple(tags) for sentences in raw.values() for tags in sentences}
        found = detect_scheme(distinct)
        converted = {tags: list(to_iob2(tags, scheme=found)) for tags in distinct}
        raw = {split: [converted[tuple(tags)] for tags in sentences] for split, sentences in raw.items()}
        names = _label_names({split: [([], tags) for tags in sentences] for split, sentences in raw.items()})
    else:
        names = class_names(raw.values())
    # every split read, not only the chosen ones: an entry that cached a split earlier relabels it too
    return LabelColumn(kind, names, dict(raw))


def select(splits: dict[str, list[Sentence]], keep: list[str] | None, *, name: str) -> list[str]:
    """Canonical names of the requested splits, in dataset order; unknown names are an error."""
    if keep is None:
        return list(splits)
    wanted = {SPLIT_ALIASES.get(s, s) for s in keep}
    missing = sorted(wanted - set(splits))
    if missing:
        raise LayerfuseError(
            f"dataset {name!r} has no split {', '.join(map(repr, missing))}; available: {', '.join(splits)}"
        )
    return [s for s in splits if s in wanted]


def build(
    *, name: str, source: str, raw: dict[str, list[Sentence]], scheme: str, keep: list[str] | None,
    extras: Extras | None = None, primary: str = "ner", primary_kind: str = SPAN,
) -> TaggedDataset:
    """Normalise tags to IOB2 with one scheme for the whole dataset and assemble the result; a token-level
    primary set (``primary_kind``: a POS-tagged file's ``pos``) keeps its tags as they are, as word classes."""
    raw = ordered(raw)
    if "train" not in raw:
        raise LayerfuseError(f"{source}: no train split (has {', '.join(raw) or 'none'})")
    if primary_kind == SPAN:
        splits, found = _to_iob2(raw, scheme)
        labels, unseen = _label_names(splits), _unseen_in_train(splits)
    elif normalise_scheme(scheme) != "auto":  # it would name the scheme of no tags read: said, not ignored
        raise OptionError(f"scheme {scheme!r}: the primary label set {primary} holds word classes, not spans "
                          "in a tag scheme; leave the scheme out")
    else:
        splits, found = raw, "none"
        labels = class_names([[tags for _, tags in sentences] for sentences in raw.values()])
        unseen = unseen_classes(raw)
    chosen = select(splits, keep, name=name)
    dataset = TaggedDataset(
        name=name,
        source=source,
        splits={s: splits[s] for s in chosen},
        label_names=labels,
        unseen_in_train={s: sum(n.values()) for s, n in unseen.items() if s in chosen},
        unseen_types={s: sorted(n) for s, n in unseen.items() if s in chosen and n},
        source_scheme=found,
        primary=primary,
        primary_kind=primary_kind,
        label_sets={set_name: _label_column(kind, tags)
                    for set_name, (kind, tags) in (extras or {}).items()},
    )
    # The whole dataset's fingerprint, whatever the filter: one cache entry per dataset, whose
    # splits can be extracted one at a time.
    dataset._fingerprints[""] = content_hash(labels, splits)
    return dataset


def _to_iob2(raw: dict[str, list[Sentence]], scheme: str) -> tuple[dict[str, list[Sentence]], str]:
    """Every split's tags in IOB2, with the scheme found (or given) over the whole dataset."""
    # Tag sequences repeat a lot (all-O sentences above all): work on each distinct one once.
    distinct = {tuple(tags) for sentences in raw.values() for _, tags in sentences}
    found = normalise_scheme(scheme)
    if found == "auto":
        found = detect_scheme(distinct)
    converted = {tags: to_iob2(tags, scheme=found) for tags in distinct}
    return {split: [(words, list(converted[tuple(tags)])) for words, tags in sentences]
            for split, sentences in raw.items()}, found
