"""Several label sets over the same rows: NER, POS and chunk tags of one CoNLL-2003 entry, say.

The hidden states of a sentence do not depend on its labels, so one entry serves every labelling of
its words. The entry's *primary* set is the ``labels`` array of each split, the one its key's
dataset fingerprint covers (``ner``, or ``upos`` for a UD treebank; entries made before label sets
existed have only it, and it is ``ner``). Every other set ``NAME`` is an array ``labels.NAME`` in
each split, listed in the entry attribute ``label_sets`` with its label names, kind, fingerprint and
the splits it covers. The listing is written last, in one attribute write, after every split's
array: a set half-written by a killed run is not listed, so it is never read, and the next run
writes it again. Adding a set writes labels only: no forward pass, hidden bytes untouched.

Kinds: ``span`` sets (IOB2: NER, chunks) are scored by span F1 in conlleval's convention,
``token`` sets (POS, UPOS, XPOS, DEPREL) by token accuracy.
"""

from __future__ import annotations

import numpy as np

from ..errors import LayerfuseError
from .store import SMALL_ARRAY_CODECS, files_of, open_group

SPAN, TOKEN = "span", "token"
KINDS = (SPAN, TOKEN)
LISTING = "label_sets"  # the entry attribute
PRIMARY = "primary_labels"  # the entry attribute naming the primary set; absent = "ner"
ARRAY_PREFIX = "labels."


def primary_name(meta: dict) -> str:
    return str(meta.get(PRIMARY) or "ner")


def listed(meta: dict) -> dict[str, dict]:
    """Every label set of an entry with metadata ``meta``: {name: {"names", "kind", "splits"?,
    "fingerprint"?}}, the primary first (from ``label_names`` for entries that list none)."""
    primary = primary_name(meta)
    sets = {primary: {"names": list(meta.get("label_names") or []), "kind": meta.get("primary_kind", SPAN)}}
    sets.update({name: dict(info) for name, info in (meta.get(LISTING) or {}).items() if name != primary})
    return sets


def array_name(meta: dict, name: str) -> str:
    """The array of set ``name`` in each split: ``labels`` for the primary set."""
    return "labels" if name == primary_name(meta) else ARRAY_PREFIX + name


def check_name(meta: dict, name: str, *, where: str) -> dict:
    """The listing of set ``name``, or a one-line error naming the sets there are."""
    sets = listed(meta)
    if name not in sets:
        raise LayerfuseError(f"--labels {name!r}: {where} has the label sets {', '.join(sets)} "
                              f"(add one with `extract ... --labels {name}`, which writes labels only)")
    return sets[name]


def view_meta(meta: dict, name: str | None, *, where: str) -> dict:
    """``meta`` as seen through label set ``name`` (None = the primary): its ``label_names``,
    ``entity_types`` (a token set's are its classes: C of an N-way sample), ``label_set`` and ``label_kind``."""
    name = name or primary_name(meta)
    info = check_name(meta, name, where=where)
    out = {**meta, "label_set": name, "label_kind": info["kind"], "label_names": list(info["names"])}
    if info["kind"] == TOKEN:
        out["entity_types"] = list(info["names"])
    elif name != primary_name(meta):
        out["entity_types"] = [label[2:] for label in info["names"][1::2]]
    return out


def is_current(meta: dict, name: str, *, fingerprint: str, splits) -> bool:
    """Whether set ``name`` is listed with this content and covers ``splits``."""
    info = (meta.get(LISTING) or {}).get(name)
    return bool(info) and info.get("fingerprint") == fingerprint and set(splits) <= set(info.get("splits", ()))


def write_label_set(entry_path: str, name: str, *, kind: str, names: list[str], fingerprint: str,
                    labels: dict[str, np.ndarray]) -> None:
    """Store set ``name`` (``labels``: split -> [rows] int label ids, negative = no label) and list it
    once every split's array is written. Only labels are written."""
    if kind not in KINDS:
        raise LayerfuseError(f"label set {name!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
    root = open_group(entry_path, mode="a")
    if name == primary_name(dict(root.attrs)):
        raise LayerfuseError(f"label set {name!r} is the primary set of {entry_path}: it is written with the rows")
    for split, ids in labels.items():
        group = root[split]
        n_rows = int(group.attrs["n_rows"])
        if len(ids) != n_rows:
            raise LayerfuseError(f"label set {name!r}: {len(ids)} labels for the {n_rows} rows of split {split!r}")
        key = ARRAY_PREFIX + name
        if key in group:
            del group[key]
        group.create_array(key, data=np.asarray(ids, dtype=np.int16), chunks=(max(1, min(n_rows, 262144)),),
                           compressors=SMALL_ARRAY_CODECS)
    key = ARRAY_PREFIX + name
    files = {split: files_of(root[split], names=[key])[key] for split in labels}  # what readers must find
    sets = dict(root.attrs.get(LISTING) or {})
    sets[name] = {"names": list(names), "kind": kind, "fingerprint": fingerprint, "splits": sorted(labels),
                  "files": files}
    root.attrs[LISTING] = sets  # listed last: a set is read only once every split holds it
