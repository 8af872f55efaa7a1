"""How a dataset's fields are read: which columns of a CoNLL-style file, which fields of a HF dataset
hold the words and the tags (:class:`Reading`). It travels in the extraction's config
(`ExtractConfig.read`), never beside it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from layerfuse.errors import LayerfuseError, OptionError

_SET_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Reading:
    """Which fields of a dataset hold the words and the tags.

    ``columns`` (CoNLL-style files): ``"word=0,ner=3"`` or a mapping, label set name -> 0-based
    column; ``word`` (default 0) the words, ``ner`` the tags; more names are more label sets (``chunk``
    spans, any other name tokens, e.g. ``pos=1``). Without ``ner`` the first set named is the primary one
    (``word=0,pos=1``: a POS-tagged file, its other columns unread). None: the word first, the tag last
    (and CoNLL-2003's pos and chunk between). ``tokens_field``/``tags_field``: the fields of a HF dataset.
    """

    columns: str | dict[str, int] | None = None
    tokens_field: str = "tokens"
    tags_field: str = "ner_tags"

    @property
    def default(self) -> bool:
        return self == Reading()

    def column_map(self) -> dict[str, int] | None:
        """``columns`` as {name: column}, ``word`` first and ``ner`` second; bad text is an error."""
        return None if self.columns is None else parse_columns(self.columns)

    def describe(self) -> str:
        """What the source string records beside the path: `` (columns word=0,ner=3)`` or ``""``."""
        if self.columns is not None:
            return " (columns " + ",".join(f"{n}={c}" for n, c in self.column_map().items()) + ")"
        if (self.tokens_field, self.tags_field) != ("tokens", "ner_tags"):
            return f" (fields {self.tokens_field}, {self.tags_field})"
        return ""


def columns_of_source(source: str | None) -> str | None:
    """The ``--columns`` a dataset was read with, from the source string `describe` wrote, or None."""
    found = re.search(r" \(columns ([^)]*)\)$", source or "")
    return found.group(1) if found else None


def parse_columns(spec: str | dict[str, int]) -> dict[str, int]:
    """``"word=0,ner=3"`` (or a mapping) -> {"word": 0, "ner": 3, ...}: word (default 0), the primary label
    set (`primary_of`), then the other label sets in the order given; a bad item is a one-line error naming it."""
    text = spec if isinstance(spec, str) else ",".join(f"{k}={v}" for k, v in spec.items())
    found: dict[str, int] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not _SET_NAME.fullmatch(name):
            raise OptionError(f"--columns {text!r}: {item!r} is not NAME=COLUMN (e.g. word=0,ner=3)")
        if not value.isdigit():
            raise OptionError(f"--columns {text!r}: {value!r} is not a column number (0 is the first column)")
        if name in found:
            raise OptionError(f"--columns {text!r}: {name} is given twice")
        found[name] = int(value)
    word = found.pop("word", 0)
    if not found:
        raise OptionError(f"--columns {text!r}: name a tag column, e.g. ner=3 or pos=1 (0 is the first column)")
    primary = "ner" if "ner" in found else next(iter(found))
    columns = {"word": word, primary: found.pop(primary), **found}
    named: dict[int, str] = {}
    for name, column in columns.items():  # one column, one meaning: a second name would store one set under two
        if column in named:
            raise OptionError(f"--columns {text!r}: {named[column]} and {name} are the same column ({column})")
        named[column] = name
    return columns


def primary_of(columns: dict[str, int]) -> str:
    """The primary label set of a `parse_columns` map: ``ner`` where named (the other sets then never change the
    entry key), else the first set named (``word=0,pos=1``: a file without NER tags, whose tag columns that no
    name reads are never read, so never checked)."""
    return next(name for name in columns if name != "word")


def reject(read: Reading, spec: str, what: str, *, fields: bool = False, columns: bool = False) -> None:
    """A one-line error when the reading names columns (``columns``) or fields (``fields``) that ``spec`` lacks."""
    if columns and read.columns is not None:
        raise LayerfuseError(f"--columns names the columns of CoNLL-style files; dataset {spec!r} is {what}")
    if fields and (read.tokens_field, read.tags_field) != ("tokens", "ner_tags"):
        raise LayerfuseError(f"--tokens-field and --tags-field name the fields of a HF dataset; dataset {spec!r} "
                              f"is {what}" + (" (--columns names its columns)" if not columns else ""))
