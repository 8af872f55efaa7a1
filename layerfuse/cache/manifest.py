"""What a finished split records of its arrays' metadata, so that metadata which stays valid JSON but
lies (an array's shape, dtype or chunking edited, a label name changed) is an error naming it, never a
silent misread: chunk checksums cover the bytes, not the zarr.json that says how to read them.

A split's completion record (`writer.SplitWriter.finish`, the one attribute write that marks it
complete) holds ``arrays``, each array's shape, dtype and chunk shape as written, and a digest of the
entry's label names; a label set's listing holds the digest of its names. Readers compare when they
open an array or a split; `verify` compares everything. Entries written before these records pass.
"""

from __future__ import annotations

import hashlib
import json

from ..errors import LayerfuseError
from .layout import subgroups

# What a damaged entry's error advises: `extract` refuses a damaged entry (it would reuse the broken split),
# so the entry goes first; `verify` lists every problem, not only the first one met.
REPAIR = "run `layerfuse verify` to list what is damaged, then `layerfuse rm` the entry and extract it again"

ARRAYS = "arrays"  # split attribute: {array: {"shape", "dtype", "chunks"}}
NAMES = "label_names_sha256"  # split attribute (the entry's label names), and a label set listing's key


def describe(array) -> dict:
    return {"shape": [int(x) for x in array.shape], "dtype": str(array.dtype),
            "chunks": [int(x) for x in array.chunks]}


def names_digest(names) -> str:
    return hashlib.sha256(json.dumps([str(x) for x in names]).encode("utf-8")).hexdigest()


def array_problem(where: str, split: str, name: str, array, attrs: dict) -> str | None:
    """Why array ``split/name`` is not what its split recorded when it was finished, or None."""
    want = (attrs.get(ARRAYS) or {}).get(name)
    got = describe(array)
    if want is None or got == want:
        return None
    diff = ", ".join(f"{k} {got[k]} (recorded {want.get(k)})" for k in got if got[k] != want.get(k))
    return f"{where}: array {split}/{name} has {diff}: its zarr.json changed after the split was finished; {REPAIR}"


def names_problem(where: str, what: str, names, digest: str | None) -> str | None:
    """Why ``names`` (of ``what``: the entry, a label set) are not the ones recorded, or None."""
    if digest is None or names_digest(names) == digest:
        return None
    return (f"{where}: the label names of {what} are not the ones recorded when it was written "
            f"(edited since?): {', '.join(map(str, names))}; {REPAIR}")


def check(problem: str | None) -> None:
    if problem is not None:
        raise LayerfuseError(problem)


def problems(path: str, group, sets: dict) -> list[str]:
    """Every recorded array and label-name digest of the entry ``group`` (its label sets' listing ``sets``)
    that no longer matches."""
    attrs = dict(group.attrs)
    out = []
    for split, g in subgroups(group):
        if not g.attrs.get("complete") or "kind" in g.attrs:
            continue
        split_attrs = dict(g.attrs)
        out.append(names_problem(path, f"split {split}", attrs.get("label_names") or [], split_attrs.get(NAMES)))
        arrays = dict(g.arrays())
        out += [array_problem(path, split, name, arrays[name], split_attrs)
                for name in (split_attrs.get(ARRAYS) or {}) if name in arrays]
    for name, info in sets.items():
        out.append(names_problem(path, f"label set {name!r}", info.get("names") or [], info.get(NAMES)))
    return [p for p in out if p is not None]
