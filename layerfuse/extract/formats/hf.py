"""HF ``datasets`` sources: a ``save_to_disk`` directory (``dataset_dict.json`` or ``state.json``; read
without network) and a hub name (see :mod:`layerfuse.extract.hub_datasets`: ``conll03``,
``wikiann:LANG`` and any other name).

The words are field ``tokens`` and the tags field ``ner_tags`` (a sequence of ``ClassLabel`` or of tag
strings), unless ``Reading.tokens_field``/``Reading.tags_field`` name others; split ``validation`` (or
``valid``/``dev``) becomes ``dev``.
"""

from __future__ import annotations

from pathlib import Path

from layerfuse.cache.label_sets import SPAN, TOKEN
from layerfuse.errors import LayerfuseError
from layerfuse.extract.hub_datasets import load_hub, one_line
from layerfuse.extract.iob import split_tag
from layerfuse.extract.reading import Reading
from layerfuse.extract.tagged import SPLIT_ALIASES, Extras, Sentence, TaggedDataset

from .registry import DatasetFormat, Request, looks_like_path


def _read_hf_disk(directory: Path, read: Reading) -> tuple[dict[str, list[Sentence]], Extras]:
    """Load a ``save_to_disk`` directory (a DatasetDict or a single Dataset) without network."""
    import datasets

    try:
        loaded = datasets.load_from_disk(str(directory))
    except Exception as err:  # datasets raises many types; the user needs one line
        raise LayerfuseError(
            f"{directory}: cannot load datasets save_to_disk data: {one_line(err)}"
        ) from None
    return _from_hf(loaded, where=str(directory), read=read)


# ClassLabel sequence columns read beside ``ner_tags`` when every split has them (CoNLL-2003 on the hub).
HF_LABEL_COLUMNS = {"pos_tags": ("pos", TOKEN), "chunk_tags": ("chunk", SPAN)}


def _from_hf(loaded, *, where: str, read: Reading) -> tuple[dict[str, list[Sentence]], Extras]:
    """Convert a HF Dataset/DatasetDict with word and tag fields (``tokens`` and ``ner_tags`` unless
    ``read`` names others; tags as ClassLabel ids or strings), and ``pos_tags``/``chunk_tags`` as label
    sets where every split has them."""
    import datasets

    if isinstance(loaded, datasets.Dataset):
        split = str(loaded.split) if loaded.split is not None else "train"
        loaded = {split: loaded}
    raw: dict[str, list[Sentence]] = {}
    named: dict[str, str] = {}  # canonical split -> the dataset's name for it
    for split, table in loaded.items():
        canonical = SPLIT_ALIASES.get(str(split), str(split))
        if canonical in named:  # 'valid' and 'validation' both: one would silently replace the other
            raise LayerfuseError(f"{where}: splits {named[canonical]!r} and {split!r} are both {canonical!r}; "
                                  "keep one of them")
        named[canonical] = str(split)
        raw[canonical] = _hf_split(table, where=f"{where} split {split!r}", read=read)
        if not raw[canonical]:
            raise LayerfuseError(f"{where} split {split!r}: no sentences (every row's {read.tokens_field} is empty)")
    extras: Extras = {}
    for column, (name, kind) in HF_LABEL_COLUMNS.items():
        if not all(column in table.column_names for table in loaded.values()):
            continue
        tags = {}
        for split, table in loaded.items():
            names = _item_feature(table.features[column])
            if not isinstance(names, datasets.ClassLabel):
                break
            tags[SPLIT_ALIASES.get(str(split), str(split))] = _extra_tags(
                table, column, names.names, where=f"{where} split {split!r}", tokens=read.tokens_field)
        else:
            extras[name] = (kind, tags)
    return raw, extras


def _extra_tags(table, column: str, names: list[str], *, where: str, tokens: str) -> list[list[str]]:
    """Each non-empty row's tags of ``column`` (a label set beside the primary one), checked as the primary
    tags are: as many as the row's words (one short took the next sentence's first tag on a subword cache),
    and every id a label."""
    out = []
    for row, (words, ids) in enumerate(zip(table[tokens], table[column])):
        if not words:
            continue
        if len(ids) != len(words):
            raise LayerfuseError(f"{where} row {row}: {len(words)} {tokens} but {len(ids)} {column}")
        bad = [i for i in ids if not (isinstance(i, int) and 0 <= i < len(names))]
        if bad:
            raise LayerfuseError(f"{where} row {row}: {column} id {bad[0]!r} is not a label")
        out.append([names[i] for i in ids])
    return out


def _item_feature(feature):
    """The feature of a sequence's items: ``Sequence``/``List``/``LargeList``'s, or a one-item list
    literal's (``[Value("string")]``, as datasets 3 stores some features); None for no sequence."""
    if isinstance(feature, list):
        return feature[0] if len(feature) == 1 else None
    return getattr(feature, "feature", None)


def _hf_label_names(table, *, where: str, read: Reading) -> list[str] | None:
    """Tag names of the tag field's ClassLabel, each checked as a tag; None when it holds tag strings."""
    import datasets

    fields = {read.tokens_field: "--tokens-field", read.tags_field: "--tags-field"}
    missing = [f"{name!r} ({option})" for name, option in fields.items() if name not in table.column_names]
    if missing:
        raise LayerfuseError(f"{where}: no field {' and no field '.join(missing)}; it has "
                              f"{', '.join(table.column_names)}")
    words = _item_feature(table.features[read.tokens_field])  # a sequence of strings, and nothing else:
    if not (isinstance(words, datasets.Value) and words.dtype in ("string", "large_string")):  # a str is letters
        raise LayerfuseError(f"{where}: field {read.tokens_field!r} must be a sequence of strings (the words), got "
                              f"{table.features[read.tokens_field]}")
    tags = read.tags_field
    inner = _item_feature(table.features[tags])
    if isinstance(inner, datasets.Value) and inner.dtype in ("string", "large_string"):
        return None
    if not isinstance(inner, datasets.ClassLabel):
        raise LayerfuseError(f"{where}: field {tags!r} must be a sequence of ClassLabel or of tag strings, "
                              f"got {table.features[tags]}")
    for name in inner.names:
        split_tag(name, where=f"{where} {tags} label")
    return list(inner.names)


def _hf_split(table, *, where: str, read: Reading) -> list[Sentence]:
    """Rows -> (words, tag names); empty rows carry no words and are skipped."""
    label_names = _hf_label_names(table, where=where, read=read)
    names = dict(enumerate(label_names or []))
    tokens, tags_field = read.tokens_field, read.tags_field
    columns = table.select_columns(list(dict.fromkeys([tokens, tags_field]))).to_dict()
    sentences: list[Sentence] = []
    first_row: dict[str, int] = {}  # tag strings: each distinct tag is checked once, at its first row
    for row, (words, ids) in enumerate(zip(columns[tokens], columns[tags_field])):
        if len(words) != len(ids):
            raise LayerfuseError(f"{where} row {row}: {len(words)} {tokens} but {len(ids)} {tags_field}")
        if label_names is None:
            tags = [str(tag) for tag in ids]
            for tag in tags:
                first_row.setdefault(tag, row)
        else:
            try:
                tags = [names[i] for i in ids]
            except KeyError as err:
                raise LayerfuseError(f"{where} row {row}: {tags_field} id {err.args[0]} is not a label") from None
        # A missing token (None, a null in the Arrow column) is refused, not stored as the word "None" nor
        # dropped: either would train and score on a sentence the dataset does not hold, and dropping it
        # would also part the words from their tags. The dataset is to be fixed where it was made.
        for position, word in enumerate(words):
            if word is None:
                raise LayerfuseError(f"{where} sentence {row} (row {row}), position {position}: {tokens} holds "
                                     "a missing token (None); fix or drop that sentence in the dataset")
        if label_names is None and None in ids:
            raise LayerfuseError(f"{where} sentence {row} (row {row}), position {list(ids).index(None)}: "
                                 f"{tags_field} holds a missing tag (None)")
        if words:
            sentences.append(([str(w) for w in words], tags))
    for tag, row in first_row.items():
        split_tag(tag, where=f"{where} row {row} field {tags_field!r}")
    return sentences


def _load_disk(request: Request) -> TaggedDataset:
    directory = request.path
    raw, extras = _read_hf_disk(directory, request.read)
    return request.tagged(name=directory.name, source=str(directory), raw=raw, extras=extras)


def _load_hub(request: Request) -> TaggedDataset:
    """A hub dataset (script-free source chosen by hub_datasets), converted like a local one."""
    name, source, loaded = load_hub(request.spec)
    raw, extras = _from_hf(loaded, where=f"hf dataset {request.spec!r}", read=request.read)
    return request.tagged(name=name, source=source, raw=raw, extras=extras)


def _is_saved_to_disk(request: Request) -> bool:
    return (request.path / "dataset_dict.json").is_file() or (request.path / "state.json").is_file()


HF_DISK = DatasetFormat(
    name="hf-disk", help="HF save_to_disk directory", claims=_is_saved_to_disk, load=_load_disk,
    what="a datasets save_to_disk directory (--tokens-field and --tags-field name its fields)",
    takes=frozenset({"fields"}))
HF_HUB = DatasetFormat(
    name="hf-hub", help="HF hub name (conll03, wikiann:LANG or any other)",
    claims=lambda request: not looks_like_path(request.spec), load=_load_hub,
    what="a HF hub dataset", takes=frozenset({"fields"}), catch_all=True)
