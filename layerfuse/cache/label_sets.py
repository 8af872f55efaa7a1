"""Several label sets over the same rows: NER, POS and chunk tags of one CoNLL-2003 entry, say.

The hidden states of a sentence do not depend on its labels, so one entry serves every labelling of
its words. The entry's *primary* set is the ``labels`` array of each split, the one its key's
dataset fingerprint covers (``ner``, or ``upos`` for a UD treebank; entries made before label sets
existed have only it, and it is ``ner``). Every other set ``NAME`` is an array ``labels.NAME.v<k>``
in each split, listed in the entry attribute ``label_sets`` with its label names, kind, version,
array, per-split fingerprints, the splits it covers and the data it was read from (``dataset``, ``source``:
entries listed before them lack both, and are read as the entry's own data). The listing is written last, in one atomic
attribute write, after every split's array: a set half-written by a killed run is not listed, so it
is never read, and the next run writes it again. Adding a set writes labels only: no forward pass,
hidden bytes untouched.

A written version is never changed: relabelling writes version k + 1 beside it and switches the
listing to it, so a reader keeps reading the arrays of the listing it opened. Relabelling some splits
(``extract --splits test``) carries the other splits over into the new version: a set only grows.
Versions no listing names are deleted at a relabel once no reader has the entry open
(`usage.readers_of`), but the version just replaced, which a server's client (holding no lock) may still read:
it goes at the next relabel.

Kinds: ``span`` sets (IOB2: NER, chunks) are scored by span F1 in conlleval's convention,
``token`` sets (POS, UPOS, XPOS, DEPREL) by token accuracy.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import LayerfuseError, OptionError
from . import manifest
from .layout import is_remote, subgroups
from .store import SMALL_ARRAY_CODECS, files_of, open_group
from .writer import named_writes

SPAN, TOKEN = "span", "token"
KINDS = (SPAN, TOKEN)
LISTING = "label_sets"  # the entry attribute
PRIMARY = "primary_labels"  # the entry attribute naming the primary set; absent = "ner"
ARRAY_PREFIX = "labels."
ORIGIN = ("dataset", "source")  # a listed set's data: its name and how it was read (the entry's `dataset_source`)


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
    """The array of set ``name`` in each split: ``labels`` for the primary set, the listed version's for the
    others (``labels.NAME`` in entries written before versions)."""
    if name == primary_name(meta):
        return "labels"
    array = ((meta.get(LISTING) or {}).get(name) or {}).get("array") or ARRAY_PREFIX + name
    # the set's own array, as `write_label_set` names it: an edited listing that points at another array
    # ("labels", "hidden", "../x") read other ids as this set's, or something that is no array of a split
    if not isinstance(array, str) or not re.fullmatch(re.escape(ARRAY_PREFIX + name) + r"(\.v\d+)?", array):
        raise LayerfuseError(f"label set {name!r} names the array {array!r}, not its own ({ARRAY_PREFIX}{name}.vN): "
                             "the entry's metadata was edited; take another copy of the entry, or extract it again")
    return array


def check_name(meta: dict, name: str, *, where: str) -> dict:
    """The listing of set ``name``, or a one-line error naming the sets there are."""
    sets = listed(meta)
    if name not in sets:
        raise OptionError(f"--labels {name!r}: {where} has the label sets {', '.join(sets)} "
                          f"(add one with `extract ... --labels {name}`, which writes labels only)")
    return sets[name]


def view_meta(meta: dict, name: str | None, *, where: str) -> dict:
    """``meta`` as seen through label set ``name`` (None = the primary): its ``label_names``,
    ``entity_types`` (a token set's are its classes: C of an N-way sample), ``label_set``, ``label_kind``,
    ``label_fingerprints`` (`fingerprints_of`) and, for a set listed with the data it was read from,
    ``dataset`` and ``dataset_source`` (`origin_of`)."""
    name = name or primary_name(meta)
    info = check_name(meta, name, where=where)
    manifest.check(manifest.names_problem(where, f"label set {name!r}", info["names"], info.get(manifest.NAMES)))
    out = {**meta, "label_set": name, "label_kind": info["kind"], "label_names": list(info["names"]),
           "label_fingerprints": fingerprints_of(meta, name), **origin_of(meta, name)}
    if info["kind"] == TOKEN:
        out["entity_types"] = list(info["names"])
    elif name != primary_name(meta):
        out["entity_types"] = [label[2:] for label in info["names"][1::2]]
    return out


def origin_of(meta: dict, name: str) -> dict:
    """The data set ``name`` was read from, as the entry's ``dataset`` and ``dataset_source`` attributes: a set
    added from another corpus of the same words (``chunk`` of a three-column copy of a POS entry's files) is
    that corpus's, not the entry's. Empty for the primary set and for a set listed without them."""
    info = (meta.get(LISTING) or {}).get(name) or {}
    if name == primary_name(meta) or not all(isinstance(info.get(k), str) for k in ORIGIN):
        return {}
    return {"dataset": info["dataset"], "dataset_source": info["source"]}


def fingerprints_of(meta: dict, name: str | None) -> dict[str, str] | None:
    """What tells set ``name``'s labels apart beyond the entry's key, which covers the primary set's alone:
    the fingerprint of each split's labels, as listed. A relabel changes one; adding a split adds one.
    Runs and probes record them (`same_labels`), so a rerun after a relabel is not taken for one done.
    None for the primary set and for a listing from before per-split fingerprints (`extract` rewrites it
    once, its labels unchanged): its content is not known."""
    name = name or primary_name(meta)
    info = (meta.get(LISTING) or {}).get(name) or {}
    known = {split: fp for split, fp in (info.get("split_fingerprints") or {}).items() if fp}
    return known if name != primary_name(meta) and known else None


def same_labels(recorded: dict | None, current: dict | None) -> bool:
    """Whether labels recorded as ``recorded`` (`fingerprints_of`) are those listed now as ``current``, in
    every split both know (a split added since changes nothing); unknown on either side: taken as the same."""
    if not recorded or not current:
        return True
    return all(recorded[split] == current[split] for split in recorded.keys() & current.keys())


def is_current(meta: dict, name: str, *, fingerprints: dict[str, str]) -> bool:
    """Whether set ``name`` is listed with this content (``fingerprints``: split -> fingerprint) for every
    split of ``fingerprints``; a listing from before per-split fingerprints never is (it is rewritten once)."""
    listed_fps = ((meta.get(LISTING) or {}).get(name) or {}).get("split_fingerprints") or {}
    return all(listed_fps.get(split) == fp for split, fp in fingerprints.items())


def write_label_set(entry_path: str, name: str, *, kind: str, names: list[str], fingerprints: dict[str, str],
                    labels: dict[str, np.ndarray], origin: tuple[str, str] | None = None) -> None:
    """Store set ``name`` (``labels``: split -> [rows] int label ids, negative = no label; ``fingerprints``:
    split -> its content's fingerprint) as a new version, carrying over the listed version's other splits,
    and list it once every split's array is written. Only labels are written. ``origin``: (dataset name,
    source) of the data the labels were read from (`origin_of`)."""
    if kind not in KINDS:
        raise LayerfuseError(f"label set {name!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name):  # as --columns takes them
        raise LayerfuseError(f"label set name {name!r}: a lower-case letter, then letters, digits or '_' (it names "
                             "the set's array; 'a/b' failed there)")
    if len(set(names)) != len(names):
        raise LayerfuseError(f"label set {name!r}: its names hold duplicates ({', '.join(map(str, names))})")
    root = open_group(entry_path, mode="a")
    meta = dict(root.attrs)
    if name == primary_name(meta):
        raise LayerfuseError(f"label set {name!r} is the primary set of {entry_path}: it is written with the rows")
    old = (meta.get(LISTING) or {}).get(name)
    labels, fingerprints = dict(labels), dict(fingerprints)
    if old and old.get("kind") == kind and list(old.get("names", ())) == list(names):
        for split in old.get("splits", ()):  # splits this run does not relabel keep their labels
            if split not in labels:
                labels[split] = root[split][array_name(meta, name)][:]
                fingerprints[split] = (old.get("split_fingerprints") or {}).get(split)
    version = int(old.get("version", 1)) + 1 if old else 1
    key = f"{ARRAY_PREFIX}{name}.v{version}"
    with named_writes(root, f"label set {name!r}"):  # a full disk in zarr's own writes named no file
        _write_arrays(root, name, key, labels, names, entry_path=entry_path)
        files = {split: files_of(root[split], names=[key])[key] for split in labels}  # what readers must find
        sets = dict(meta.get(LISTING) or {})
        sets[name] = {"names": list(names), manifest.NAMES: manifest.names_digest(names), "kind": kind,
                      "version": version, "array": key, "splits": sorted(labels),
                      "split_fingerprints": fingerprints, "files": files,
                      **(dict(zip(ORIGIN, origin)) if origin else {})}
        root.attrs[LISTING] = sets  # listed last, in one atomic write: a set is read only once every split holds it
    _drop_unlisted(entry_path, root, sets, keep={array_name(meta, name)} if old else set())


def _write_arrays(root, name: str, key: str, labels: dict, names, *, entry_path: str) -> None:
    """Each split's labels of set ``name`` as its array ``key``, checked against the split's rows."""
    for split, ids in labels.items():
        if split not in root:
            raise LayerfuseError(f"label set {name!r}: {entry_path} has no split {split!r}")
        group = root[split]
        n_rows = int(group.attrs["n_rows"])
        if len(ids) != n_rows:
            raise LayerfuseError(f"label set {name!r}: {len(ids)} labels for the {n_rows} rows of split {split!r}")
        _check_ids(name, split, np.asarray(ids), n_names=len(names))
        if key in group:  # left unlisted by a killed run: nobody reads it
            del group[key]
        group.create_array(key, data=np.asarray(ids, dtype=np.int16), chunks=(max(1, min(n_rows, 262144)),),
                           compressors=SMALL_ARRAY_CODECS)


def _check_ids(name: str, split: str, ids: np.ndarray, *, n_names: int) -> None:
    """Integer ids below the number of names (negative: no label): a float was truncated in silence, an id
    past the names failed only in training, as a target out of bounds."""
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise LayerfuseError(f"label set {name!r}, split {split!r}: label ids must be integers, not {ids.dtype}")
    if ids.size and int(ids.max()) >= n_names:
        raise LayerfuseError(f"label set {name!r}, split {split!r}: label id {int(ids.max())} is past its "
                             f"{n_names} names (ids 0..{n_names - 1}; negative = no label)")
    if ids.size and int(ids.min()) < np.iinfo(np.int16).min:  # stored as int16: -40000 read back as label 25536
        raise LayerfuseError(f"label set {name!r}, split {split!r}: label id {int(ids.min())} is below int16's "
                             "range (a negative id means no label: use -1)")


def _drop_unlisted(entry_path: str, root, sets: dict, *, keep: set[str]) -> None:
    """Delete label arrays no listing names (but ``keep``, the version just replaced, which an HTTP client
    that holds no lock may still read), once no local reader has the entry open: one that opened an older
    listing holds the entry (`usage.hold`) and keeps reading the version it opened."""
    from .usage import readers_of

    if is_remote(entry_path) or readers_of(entry_path) != []:  # None: cannot tell, so keep them
        return
    keep = keep | {info.get("array") or ARRAY_PREFIX + n for n, info in sets.items()}
    for _, group in subgroups(root):
        for key in [k for k, _ in group.arrays() if k.startswith(ARRAY_PREFIX) and k not in keep]:
            del group[key]
