"""Writing one split of a cache entry, unit by unit, so an interrupted run resumes.

The hidden array `[rows, L+1, d]` is divided into units of `unit_rows` rows, one zarr shard each.
A unit is written whole, then its flag in the `done` array is set (one tiny chunk per unit, written
atomically by the store). On resume the flagged units are skipped and every other unit is computed
again from scratch, so a unit half-written when the process died is simply overwritten. The split
is marked `complete` only after every unit is flagged; readers refuse anything else.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import zarr

from ..errors import LayerfuseError
from . import manifest
from .codec import CODECS, SCALES, ZERO_SHARE_WARNING, Codec, codec_of
from .layout import FINISHED_FORMAT, PLAN, is_remote, local_path
from .shard import cut_shards, remove_stale_partials, shard_files
from .store import CHECKSUM, SMALL_ARRAY_CODECS, files_of, open_group, shard_keys

LABEL_SET_PREFIX = "labels."  # label_sets.ARRAY_PREFIX (that module imports this one's neighbours)
STORAGE_DTYPES = {name: codec.stored for name, codec in CODECS.items()}  # the ``hidden`` array's dtype per format
# How units reach disk, for measuring what writing costs (scripts/bench_extract.py --where):
# "direct" (the default: a unit that is one whole shard goes straight to its file, `shard.py`),
# "zarr" (zarr's own pipeline for every unit) or "none" (rows dropped, units still flagged done:
# the entry holds no data, so only for timing).
WRITES_ENV = "LAYERFUSE_SHARD_WRITES"
WRITES = ("direct", "zarr", "none")


@dataclass
class SplitPlan:
    """Everything fixed before the first forward pass; `plan_id` hashes what decides the bytes."""

    n_layers: int  # L + 1 (embeddings included)
    dim: int
    dtype: str  # a storage format of `codec.CODECS`: float16 | bfloat16 | float32 | int8 (with scales)
    offsets: np.ndarray  # [S + 1] int64, sentence i is rows offsets[i]:offsets[i+1]
    labels: np.ndarray  # [rows] int16 label ids (-1 unlabeled), or int32 token ids for MLM (-100 unscored)
    words: list[str]  # one per word, all sentences concatenated
    unit_rows: int
    plan_id: str
    word_index: np.ndarray | None = None  # [rows] int32, subword granularity only; -1 on special tokens' rows
    attrs: dict = field(default_factory=dict)  # extra split attributes (token budget, counts)
    arrays: dict = field(default_factory=dict)  # extra [rows] arrays stored as given (MLM: input_ids)

    @property
    def codec(self) -> Codec:
        return codec_of(self.dtype)

    @property
    def n_rows(self) -> int:
        return int(self.offsets[-1])

    @property
    def n_units(self) -> int:
        return max(1, -(-self.n_rows // self.unit_rows))

    def unit_range(self, unit: int) -> tuple[int, int]:
        return unit * self.unit_rows, min((unit + 1) * self.unit_rows, self.n_rows)


def scale_chunk_rows(plan: SplitPlan) -> int:
    """Per-vector scales (int8): one chunk per unit (a split smaller than a unit gets one chunk of its own size)."""
    return max(1, min(plan.unit_rows, plan.n_rows))


def inner_chunk_rows(unit_rows: int) -> int:
    """Inner chunks inside a shard: one layer each, at most 1024 rows, so partial reads stay cheap
    and the padding of the last chunk stays small."""
    return min(1024, unit_rows)


class SplitWriter:
    def __init__(self, group: zarr.Group, plan: SplitPlan):
        self.group = group
        self.plan = plan
        # Every chunk of a unit is real data: skip zarr's comparison of each one with the fill value.
        self.hidden = group["hidden"].with_config({"write_empty_chunks": True})
        self.done = group["done"]
        self.codec = plan.codec
        self.scales = group[SCALES].with_config({"write_empty_chunks": True}) if self.codec.scale_bytes else None
        self.zeros, self.codes = None, 0  # int8 codes at 0 per layer, and codes per layer, written by this run
        self.writes = os.environ.get(WRITES_ENV) or "direct"
        if self.writes not in WRITES:
            raise ValueError(f"{WRITES_ENV}={self.writes!r}: expected one of {', '.join(WRITES)}")
        # local stores: whole shards written straight to their files
        self.shards = shard_files(self.hidden) if self.writes == "direct" else None

    @classmethod
    def open(cls, entry_path: str, entry_attrs: dict, split: str, plan: SplitPlan, *,
             create: bool = True) -> SplitWriter:
        """Resume the split if it was started with the same plan, else (re)create it empty.
        With create=False (ranks other than 0) the split must already be there with this plan."""
        return cls.in_root(open_root(entry_path, entry_attrs), split, plan, create=create)

    @classmethod
    def in_root(cls, root: zarr.Group, split: str, plan: SplitPlan, *, create: bool = True) -> SplitWriter:
        """`open` in an entry already open for writing (`open_root`)."""
        if split in root:
            old = root[split]
            arrays = ("hidden", "done", *([SCALES] if plan.codec.scale_bytes else []))
            # an array folder removed by hand since: started again (its metadata gone, it read as a KeyError)
            if old.attrs.get("plan_id") == plan.plan_id and old.attrs.get("ready") and all(a in old for a in arrays):
                return cls(old, plan)
            if not create:
                raise RuntimeError(f"split {split!r} of {root.store} was created with another plan")
            del root[split]
        with named_writes(root, f"split {split}'s metadata and small arrays"):
            return cls(_create_split(root, split, plan), plan)

    def pending_units(self) -> list[int]:
        """The units to write: those not flagged, and those flagged whose shard is gone (`lost_units`)."""
        done = self.done[:]
        lost = set(self.lost_units()) if done.any() else set()
        return [u for u in range(self.plan.n_units) if not done[u] or u in lost]

    def lost_units(self) -> list[int]:
        """Units flagged written whose shards of ``hidden`` are not in the store (deleted, or dropped by an
        object store, after the flag): a resume trusted the flag, and the split read them as zeros."""
        if self.writes == "none":  # timing only: nothing is stored
            return []
        stored = set(files_of(self.group, ["hidden"]).get("hidden", []))
        rows = (self.hidden.shards or self.hidden.chunks)[0]  # rows one stored object holds
        gone = {int(key.split("/")[1]) for key in shard_keys(self.hidden) if key not in stored}  # by row block
        gone |= set(cut_shards(self.hidden))  # there, but cut short: a flag set before its bytes reached the disk
        lost = []
        for unit in np.flatnonzero(self.done[:]):
            lo, hi = self.plan.unit_range(int(unit))
            if gone & set(range(lo // rows, (hi - 1) // rows + 1)):
                lost.append(int(unit))
        return lost

    def write_unit(self, unit: int, rows: np.ndarray, *, scales: np.ndarray | None = None) -> None:
        """rows: [unit rows, L+1, d] float32 or stored already (int8 with its ``scales`` when quantised
        on the device); flag the unit only once it is stored."""
        if self.writes == "none":
            self.done[unit] = True
            return
        lo, hi = self.plan.unit_range(unit)
        if rows.shape[0] != hi - lo:
            raise ValueError(f"unit {unit}: {rows.shape[0]} rows for range {lo}:{hi}")
        if scales is None:  # not encoded where it was computed
            rows, scales = self.codec.encode(rows)
        if scales is not None:  # int8: how many codes are 0, per layer, of the units this run writes
            zeros = self.codec.zero_counts(rows)
            self.zeros = zeros if self.zeros is None else self.zeros + zeros
            self.codes += rows.shape[0] * rows.shape[2]
        if self.shards is not None and self.shards.shard_rows == self.plan.unit_rows:  # a unit is one shard
            self.shards.write(unit, rows)
        else:
            self.hidden[lo:hi] = rows
        if scales is not None:  # one chunk per unit: stored, like the rows, before the unit is flagged
            self.scales[lo:hi] = scales
        self.done[unit] = True

    def zero_shares(self) -> dict[int, float]:
        """{layer: share of its int8 codes at 0} of the layers above `ZERO_SHARE_WARNING`, over the units
        this run wrote (a resumed run: the rest of the split)."""
        if self.zeros is None or not self.codes:
            return {}
        return {layer: float(n) / self.codes for layer, n in enumerate(self.zeros)
                if n / self.codes > ZERO_SHARE_WARNING}

    def finish(self, stats: dict) -> None:
        unwritten = np.flatnonzero(~self.done[:])
        if len(unwritten):  # never complete with units no process wrote (their rows read as zeros)
            raise LayerfuseError(f"split {self.group.path}: unit(s) {', '.join(map(str, unwritten[:5]))} were never "
                                 "written here; with several processes every one must write to one cache root that "
                                 "all of them reach (a folder of each node's own is not one)")
        lost = self.lost_units()
        if lost:  # never complete with a hole: a rerun writes these units again
            raise LayerfuseError(f"split {self.group.path}: unit(s) {', '.join(map(str, lost[:5]))} are flagged "
                                 "written but their shards are gone from the store; rerun the same command to "
                                 "write them again")
        stats = {**stats, **self.codec.finish_attrs(None if self.scales is None else self.scales[:])}
        # The chunk files written, so readers and `verify` tell a lost file from a chunk never stored
        # (label sets, written later, list theirs in their own record).
        files = {name: keys for name, keys in files_of(self.group).items() if not name.startswith(LABEL_SET_PREFIX)}
        # And how its arrays are to be read, and the entry's label names: metadata edited later is caught.
        arrays = {name: manifest.describe(a) for name, a in self.group.arrays()
                  if not name.startswith(LABEL_SET_PREFIX)}
        names = zarr.open_group(self.group.store, mode="r").attrs.get("label_names") or []
        # One write: the split turns complete together with its stats and files, never before them.
        with named_writes(self.group, "the split's completion record"):
            self.group.update_attributes({**stats, "files": files, manifest.ARRAYS: arrays,
                                          manifest.NAMES: manifest.names_digest(names), "complete": True,
                                          "finished": time.strftime(FINISHED_FORMAT)})


@contextmanager
def named_writes(group: zarr.Group, what: str):
    """Metadata writes that name their place when they fail: a full disk met while zarr writes a
    zarr.json comes up from a file's ``write`` with no file name, so the error would name nothing."""
    try:
        yield
    except OSError as exc:
        if getattr(exc, "filename", None) or isinstance(exc, LayerfuseError):
            raise
        where = os.path.join(str(getattr(group.store, "root", group.store)), group.path, "zarr.json")
        raise LayerfuseError(f"{exc.strerror or exc} writing {what} ({where} or an array's beside it); "
                             "free space and rerun the same command to resume") from None


def remove_partials(entry_path: str, splits) -> int:
    """Delete the half-written shard files of ``splits`` that writers now gone left behind (a kill, a
    full disk): they hold space a rerun needs. Local roots only (remote stores write whole objects).
    Returns how many were removed."""
    if is_remote(entry_path):
        return 0
    return sum(len(remove_stale_partials(os.path.join(local_path(entry_path), split, "hidden"))) for split in splits)


def _exists(path: str) -> bool:
    from .store import exists

    return exists(path)


def open_root(entry_path: str, entry_attrs: dict) -> zarr.Group:
    """The entry at ``entry_path`` open for writing, created with ``entry_attrs`` if need be."""
    # a new entry: created at the path itself (a file:// URL through fsspec made no folder for it)
    root = open_group(entry_path, mode="a") if _exists(entry_path) else zarr.open_group(
        entry_path if is_remote(entry_path) else local_path(entry_path), mode="w")
    if not root.attrs.get("format_version"):
        with named_writes(root, "the entry's metadata"):
            root.update_attributes(entry_attrs)  # one metadata write (attrs.update writes once per key)
    return root


def record_plan(entry_path: str, entry_attrs: dict, splits) -> list[str]:
    """Add ``splits`` to the entry's plan before any of them is written (creating the entry if need
    be): the entry is complete only once every planned split is, so a run killed between splits
    leaves it incomplete, and the next run finishes it. Returns the plan."""
    return plan_splits(open_root(entry_path, entry_attrs), splits)


def plan_splits(root: zarr.Group, splits) -> list[str]:
    """`record_plan` in an entry already open for writing (`open_root`)."""
    plan = list(root.attrs.get(PLAN) or [])
    added = [s for s in splits if s not in plan]
    if added:
        plan += added
        with named_writes(root, "the entry's plan of splits"):
            root.attrs[PLAN] = plan
    return plan


def write_entry_arrays(entry_path: str, entry_attrs: dict, name: str, arrays: dict[str, np.ndarray]) -> None:
    """An entry-level group of whole arrays (MLM: ``lm``), flagged ``complete`` only once every
    array is stored, so a run killed half-way rewrites it; a complete one is left alone."""
    root = open_root(entry_path, entry_attrs)
    if name in root:
        if root[name].attrs.get("complete"):
            return
        del root[name]
    g = root.create_group(name)
    g.update_attributes({"kind": name, "complete": False})
    for key, data in arrays.items():
        chunks = (max(1, min(data.shape[0], max(1, (16 << 20) // max(1, data[:1].nbytes)))),) + data.shape[1:]
        g.create_array(key, data=data, chunks=chunks, compressors=[CHECKSUM])
    g.update_attributes({"complete": True, "files": files_of(g)})


def _create_split(root: zarr.Group, split: str, plan: SplitPlan) -> zarr.Group:
    n, s = plan.n_rows, len(plan.offsets) - 1
    g = root.create_group(split)
    g.update_attributes({**plan.attrs, "complete": False, "ready": False, "plan_id": plan.plan_id,
                    "n_sentences": s, "n_rows": n, "n_words": len(plan.words), "unit_rows": plan.unit_rows,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    small = dict(compressors=SMALL_ARRAY_CODECS)
    g.create_array("offsets", data=plan.offsets.astype(np.int64), chunks=(max(1, min(s + 1, 65536)),), **small)
    labels = plan.labels if plan.labels.dtype == np.int32 else plan.labels.astype(np.int16)
    g.create_array("labels", data=labels, chunks=(max(1, min(n, 262144)),), **small)
    for key, data in plan.arrays.items():
        g.create_array(key, data=data, chunks=(max(1, min(n, 262144)),), **small)
    words = np.array(plan.words, dtype=object)
    wa = g.create_array("words", shape=(len(words),), dtype=str, chunks=(max(1, min(len(words), 65536)),), **small)
    if len(words):
        wa[:] = words
    if plan.word_index is not None:
        g.create_array("word_index", data=plan.word_index.astype(np.int32), chunks=(max(1, min(n, 262144)),), **small)
    unit = plan.unit_rows
    g.create_array(
        "hidden",
        shape=(n, plan.n_layers, plan.dim),
        dtype=plan.codec.stored,
        shards=(unit, plan.n_layers, plan.dim),
        chunks=(inner_chunk_rows(unit), 1, plan.dim),  # one layer per inner chunk: layer reads touch only it
        compressors=[CHECKSUM],
        fill_value=0,
    )
    if plan.codec.scale_bytes:
        g.create_array(SCALES, shape=(n, plan.n_layers), dtype="float32",
                       chunks=(scale_chunk_rows(plan), plan.n_layers), compressors=[CHECKSUM], fill_value=1)
    g.create_array("done", shape=(plan.n_units,), dtype=bool, chunks=(1,), compressors=[CHECKSUM], fill_value=False)
    g.attrs["ready"] = True
    return g
