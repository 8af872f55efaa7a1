"""The registry of dataset formats: what each claims, how it reads, and its line in `--dataset`'s help.

A format is one :class:`DatasetFormat`. :func:`find_format` asks the specific formats (a name, a file
name, a folder's shape) in the order they were registered, then the catch-all ones (any folder, any
file, any other name), so a format registered later still comes before the catch-alls.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from layerfuse.cache.label_sets import SPAN
from layerfuse.errors import LayerfuseError
from layerfuse.extract.assemble import build
from layerfuse.extract.reading import Reading, reject
from layerfuse.extract.tagged import Extras, Sentence, TaggedDataset


@dataclass(frozen=True)
class Request:
    """One `load_dataset` call as a format sees it."""

    spec: str  # the dataset as the user named it
    read: Reading
    splits: list[str] | None = None  # the splits to keep (aliases allowed); None keeps all
    scheme: str = "auto"  # the source tag scheme, or auto to detect it

    @cached_property
    def path(self) -> Path:
        return Path(self.spec).expanduser()

    def tagged(self, *, name: str, source: str, raw: dict[str, list[Sentence]],
               extras: Extras | None = None, primary: str = "ner", primary_kind: str = SPAN) -> TaggedDataset:
        """Raw tagged splits -> the dataset: IOB2 tags, label names, the kept splits; ``source`` gets the
        reading beside it (``(columns word=0,ner=3)``), as the entry key records it. ``primary``: the name
        and kind of the set in ``raw`` (a POS-tagged file's ``pos``, word classes)."""
        return build(name=name, source=source + self.read.describe(), raw=raw, scheme=self.scheme,
                     keep=self.splits, extras=extras, primary=primary, primary_kind=primary_kind)


@dataclass(frozen=True)
class DatasetFormat:
    """A dataset format: ``claims`` says whether a request is this format's, ``load`` reads it.

    ``what`` names the format in errors (``dataset 'x' is {what}``); ``takes`` the reading options it
    honours (``columns``: --columns; ``fields``: --tokens-field/--tags-field), any other is refused
    before reading. ``catch_all``: it claims every folder, file or name of its kind, so it is asked last.
    """

    name: str
    help: str  # its phrase in `extract --dataset`'s help
    claims: Callable[[Request], bool]
    load: Callable[[Request], TaggedDataset]
    what: str
    takes: frozenset[str] = frozenset()
    catch_all: bool = False


_FORMATS: dict[str, DatasetFormat] = {}


def register(fmt: DatasetFormat) -> DatasetFormat:
    """Add ``fmt`` to the registry (after the specific formats, or the catch-alls, already there)."""
    if fmt.name in _FORMATS:
        raise ValueError(f"dataset format {fmt.name!r} is registered already")
    _FORMATS[fmt.name] = fmt
    return fmt


def unregister(name: str) -> None:
    """Remove the format ``name``."""
    del _FORMATS[name]


def formats() -> list[DatasetFormat]:
    """Every format in the order they are asked: the specific ones, then the catch-alls."""
    return sorted(_FORMATS.values(), key=lambda fmt: fmt.catch_all)  # stable: registration order within each


def find_format(request: Request) -> DatasetFormat:
    """The first format that claims ``request``; its reading options checked against what it takes."""
    for fmt in formats():
        if fmt.claims(request):
            reject(request.read, request.spec, fmt.what, fields="fields" not in fmt.takes,
                   columns="columns" not in fmt.takes)
            return fmt
    raise LayerfuseError(f"dataset path {request.spec!r} does not exist" if looks_like_path(request.spec)
                         else f"no dataset format reads {request.spec!r}")


def looks_like_path(spec: str) -> bool:
    """A spec written as a path (never a hub name), even when nothing is there: absolute, home- or
    dot-relative, deeper than a hub id's ``owner/name``, or below a folder that is here."""
    first, sep, _ = spec.partition("/")
    return (spec.startswith(("/", "./", "../", "~")) or spec in (".", "..") or spec.count("/") > 1
            or bool(sep and os.path.isdir(first)))


def help_text() -> str:
    """The formats' help phrases in the order they are asked: ``a, b, or c``."""
    phrases = [fmt.help for fmt in formats()]
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + ", or " + phrases[-1]
