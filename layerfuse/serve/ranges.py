"""A file request's ``Range`` header read as RFC 9110 §14 reads it, before Starlette's `FileResponse` sees it.

Starlette answered a header it could not parse (``bytes=abc``, ``bytes=5-2``, ``items=0-1``) with 400; the RFC
has a server ignore such a header, and a unit it does not know, and send the whole file (200). And it answered
a set holding one range past the end beside ranges it could serve with 416, where 416 is for a set of which no
range can be served. `for_file` gives the header Starlette is to see: none, or its satisfiable ranges written
plainly (a 206), or one range past the end (its 416, ``Content-Range: bytes */SIZE``).
"""

from __future__ import annotations

import re

# a range-spec: an int-range (first-last, first-) or a suffix-range (-length); digits only (`int` takes
# "+1" and "1_0" too)
_SPEC = re.compile(r"([0-9]+)-([0-9]*)|-([0-9]+)")


def satisfiable(header: str, size: int) -> list[tuple[int, int]] | None:
    """The ranges of a ``Range`` header (first and last byte, inclusive) that a file of ``size`` bytes can
    serve; [] when the header is well formed and none can (416); None when it is to be ignored: a unit other
    than bytes, or a range set that is not well formed (a last byte before its first is one)."""
    unit, equals, spec = header.partition("=")
    if not equals or unit.lower() != "bytes":  # a unit's name is case-insensitive (§14.1)
        return None
    parts = [p.strip(" \t") for p in spec.split(",")]
    if not any(parts):
        return None
    out = []
    for part in filter(None, parts):  # a list may hold empty elements (RFC 9110 §5.6.1)
        match = _SPEC.fullmatch(part)
        if match is None:
            return None
        first, last, suffix = match.groups()
        if suffix is not None:
            if int(suffix) > 0 and size > 0:
                out.append((max(0, size - int(suffix)), size - 1))
        elif last and int(last) < int(first):
            return None
        elif int(first) < size:
            out.append((int(first), min(int(last), size - 1) if last else size - 1))
    return out


def for_file(header: str, size: int) -> str | None:
    """The ``Range`` header `FileResponse` is to see for ``header`` on a file of ``size`` bytes (None: none)."""
    ranges = satisfiable(header, size)
    if ranges is None or size == 0:  # an empty file has no byte to range over: it is sent whole (200, empty)
        return None
    if not ranges:
        return f"bytes={size}-"  # past the end: Starlette's 416, with the file's size
    return "bytes=" + ",".join(f"{first}-{last}" for first, last in ranges)
