"""Tag-scheme normalisation: IOB1, IOB2 and IOBES (BILOU) tags in, IOB2 tags out.

Why: the heads are scored with ``seqeval`` in IOB2, and datasets disagree on schemes (the
CoNLL-2003 files are IOB1, WNUT and HF ``conll2003`` are IOB2, some corpora use IOBES/BILOU).
Everything past the readers therefore sees IOB2 only.

The scheme is decided once per *dataset*, not per sentence (:func:`detect_scheme`): an IOB1
sentence that never has two touching entities of one type looks like IOB2 on its own, so only
the whole corpus tells them apart.

- IOBES if any ``E-``/``S-`` (or BILOU ``L-``/``U-``) tag occurs;
- else IOB1 if any ``I-`` tag starts an entity (after ``O``, after another type, or at the start
  of a sentence);
- else IOB2.

Conversion is lenient in one documented way: an ``I-X`` (or IOBES ``E-X``) that cannot continue
an entity of type ``X`` opens a new one (``B-X``), which is exactly the IOB1 rule and the usual
repair of stray ``I-`` tags in IOB2 data. Tags that are not ``O`` or ``P-TYPE`` with a known
prefix ``P`` raise :class:`~layerfuse.errors.LayerfuseError` naming where they were found.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

from layerfuse.errors import LayerfuseError

SCHEMES = ("auto", "iob1", "iob2", "iobes", "bilou")

# BILOU's L (last) and U (unit) are IOBES's E (end) and S (single).
_PREFIX_ALIASES = {"B": "B", "I": "I", "E": "E", "S": "S", "L": "E", "U": "S"}
_TAG_RE = re.compile(r"([A-Za-z]+)-(\S+)")


def _at(where: str) -> str:
    """Prefix for an error message: ``"file:line: "`` or nothing."""
    return f"{where}: " if where else ""


@functools.lru_cache(maxsize=4096)
def _parse(tag: str) -> tuple[str, str | None] | str:
    """(prefix, type) for a good tag, else the reason it is bad; cached, tag sets are tiny."""
    if tag == "O":
        return "O", None
    match = _TAG_RE.fullmatch(tag)
    if match is None:
        return "malformed tag {!r}: expected 'O' or PREFIX-TYPE such as 'B-PER'"
    prefix = _PREFIX_ALIASES.get(match.group(1))
    if prefix is None:
        return "unknown tag prefix in {!r}: expected one of B, I, E, S (or BILOU's L, U)"
    return prefix, match.group(2)


def split_tag(tag: str, *, where: str = "") -> tuple[str, str | None]:
    """Split a tag into (prefix, type); ``"O"`` gives ``("O", None)``.

    BILOU prefixes come back as their IOBES names (``L`` -> ``E``, ``U`` -> ``S``) so callers
    handle one alphabet. ``where`` (e.g. ``"data/train.txt:17"``) goes into the error message.
    """
    parsed = _parse(tag)
    if isinstance(parsed, str):
        raise LayerfuseError(_at(where) + parsed.format(tag))
    return parsed


def check_tags(tags: Iterable[str], *, where: str = "") -> None:
    """Raise on the first malformed tag; used by readers that know the file and line."""
    for tag in tags:
        split_tag(tag, where=where)


def _starts_entity_with_i(parsed: Sequence[tuple[str, str | None]]) -> bool:
    """True if an ``I-`` tag opens an entity anywhere in a sentence (the IOB1 signature)."""
    prev_type = None
    for prefix, etype in parsed:
        if prefix == "I" and etype != prev_type:
            return True
        prev_type = etype
    return False


def _scheme_of(parsed_sentences: Iterable[Sequence[tuple[str, str | None]]]) -> str:
    """The detection rule of the module docstring, on already split tags."""
    sentences = list(parsed_sentences)
    prefixes = {prefix for parsed in sentences for prefix, _ in parsed}
    if prefixes & {"E", "S"}:
        return "iobes"
    if "I" in prefixes and any(_starts_entity_with_i(parsed) for parsed in sentences):
        return "iob1"
    return "iob2"


def detect_scheme(tag_sequences: Iterable[Sequence[str]], *, where: str = "") -> str:
    """Decide ``"iob1"``, ``"iob2"`` or ``"iobes"`` from every sentence of a dataset."""
    return _scheme_of([split_tag(tag, where=where) for tag in tags] for tags in tag_sequences)


def normalise_scheme(scheme: str) -> str:
    """Lower-case the scheme name and map ``bilou`` onto ``iobes``; reject unknown names."""
    name = scheme.lower()
    if name not in SCHEMES:
        raise LayerfuseError(f"unknown tag scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
    return "iobes" if name == "bilou" else name


def to_iob2(tags: Sequence[str], *, scheme: str = "auto", where: str = "") -> list[str]:
    """Convert one sentence's tags to IOB2.

    ``scheme="auto"`` detects the scheme from this sentence alone; readers detect it once per
    dataset with :func:`detect_scheme` and pass the result, which is the reliable way.
    ``where`` names the sentence's location for error messages.
    """
    name = normalise_scheme(scheme)
    parsed = [_parse(tag) for tag in tags]
    for i, item in enumerate(parsed):
        if isinstance(item, str):
            split_tag(tags[i], where=f"{where} token {i}" if where else f"token {i}")
    if name == "auto":
        name = _scheme_of([parsed])
    out: list[str] = []
    prev_type: str | None = None  # type of the entity still open; None after O (and IOBES E/S)
    for prefix, etype in parsed:
        if etype is None:
            out.append("O")
        elif prefix in ("B", "S") or etype != prev_type:
            out.append(f"B-{etype}")
        else:
            out.append(f"I-{etype}")
        # In IOBES an E or S closes the entity, so a following I/E of that type starts anew.
        closed = etype is None or (name == "iobes" and prefix in ("E", "S"))
        prev_type = None if closed else etype
    return out
