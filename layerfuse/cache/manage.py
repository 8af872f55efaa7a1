"""Cache management: list entries, describe one, remove one, verify every chunk's checksum."""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import stat
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from ..errors import LayerfuseError, NewerFormatError
from ..tasks import DEFAULT_TASK
from . import label_sets, manifest
from .codec import DEFAULT_DTYPE, SCALES, codec_of
from .layout import (
    ENTRY_NAME,
    FINISHED_FORMAT,
    KEY_FIELDS,
    OPTIONAL_KEY_FIELDS,
    PLAN,
    is_content_revision,
    is_remote,
    local_path,
    newer_format,
    strays_unsaid,
    subgroups,
)
from .shard import cut_shards
from .store import CorruptMetadataError, MissingChunkError, checked_store, open_group, shard_keys

# How far past this machine's clock a recorded time may lie and still count as one: clocks kept by NTP, and
# a file server's, drift apart by seconds, never by minutes.
FUTURE_TOLERANCE_S = 300.0
# An MLM entry's masking (in its key too): two entries masked with other seeds are told apart by it.
MASKING_FIELDS = ("block_size", "mlm_probability", "mask_seed")
# The key fields that tell two entries of one model and dataset apart: how the rows were made.
OPTION_FIELDS = ("granularity", "pooling", "dtype", "precision", "max_length")


@dataclass
class EntryStatus:
    path: str
    model: str
    dataset: str
    splits: dict[str, bool]  # split -> complete
    finished: str | None  # newest finish time among complete splits
    bytes_on_disk: int | None
    fields: dict = field(default_factory=dict)  # the stored key fields, and the task
    primary_labels: str = "ner"  # the primary label set's name (`label_sets.primary_name`): pos, chunk, ...

    @property
    def complete(self) -> bool:
        return bool(self.splits) and all(self.splits.values())

    @property
    def missing(self) -> list[str]:
        """Splits asked for (the entry's plan, or present) and not finished: what a rerun of
        `extract` writes."""
        return [name for name, done in self.splits.items() if not done]


class NotAnEntryError(LayerfuseError):
    """A zarr group under a cache root that layerfuse did not make (no ``format_version``)."""


def list_entries(root: str, *, sizes: bool = True, damaged: list[str] | None = None,
                 newer: list[str] | None = None) -> list[EntryStatus]:
    """Every entry directly under `root` (a path or an fsspec URL), newest first; ``sizes=False``
    skips walking each entry's files (bytes_on_disk is None), for callers that only match entries.
    A damaged entry never hides the others: it is left out, and its one-line reason appended to
    ``damaged`` when given (groups that are not layerfuse entries are passed by in silence); one of a
    newer format, to ``newer`` when given (it is not damaged: a colleague upgraded), else to ``damaged``."""
    out = []
    for path in _children(root):
        try:
            out.append(entry_status(path, size=sizes))
        except NotAnEntryError:
            continue
        except NewerFormatError as exc:
            said = newer if newer is not None else damaged
            if said is not None:
                said.append(str(exc))
        except Exception as exc:  # damaged (a corrupt zarr.json, a file gone meanwhile): said, not fatal
            if damaged is not None:
                damaged.append(_reason(path, exc))
    return sorted(out, key=lambda e: known_seconds(finished_seconds(e.finished)), reverse=True)


def in_future(seconds: float) -> bool:
    """Whether a recorded time lies later than now (beyond `FUTURE_TOLERANCE_S`): stamped by a clock that
    runs ahead of this one, or copied from such a machine with its times kept (``cp -a``, ``rsync -a``).
    It tells nothing of when: ranked as the latest, it kept an unused entry first and newest for ever."""
    return seconds > time.time() + FUTURE_TOLERANCE_S


def known_seconds(seconds: float) -> float:
    """``seconds``, or 0 (unknown, ranked as the oldest) for a time that lies in the future (`in_future`)."""
    return 0.0 if in_future(seconds) else seconds


def finished_seconds(stamp: str | None) -> float:
    """Seconds since the epoch of a ``finished`` stamp (0 for none, or one that does not parse): stamps
    carry the writer's offset, so compared as text an entry made under another time zone, or across a
    change of summer time, sorted out of its place."""
    try:
        return datetime.strptime(stamp, FINISHED_FORMAT).timestamp() if stamp else 0.0
    except (TypeError, ValueError):
        return 0.0


def _reason(path: str, exc: Exception) -> str:
    """One line on why ``path`` cannot be read: a LayerfuseError names the file already."""
    if isinstance(exc, LayerfuseError):
        return str(exc)
    if isinstance(exc, PermissionError):  # another user's entry, not open to this one: not damaged
        return f"{path}: unreadable by this user (permission denied: {exc.filename or path})"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{path}: unreadable ({type(exc).__name__}: {text})"


def _children(root: str) -> list[str]:
    if is_remote(root):
        import fsspec

        fs, base = fsspec.core.url_to_fs(root)
        try:  # not fs.exists: it answers False for a server that cannot be reached or refuses, too
            listed = fs.ls(base, detail=False)
        except FileNotFoundError:
            return []
        except OSError as exc:  # not reached (refusals, such as a 401, name their URL themselves)
            raise LayerfuseError(f"cannot list {root}: {exc.strerror or exc}") from None
        protocol = root.split("://", 1)[0]
        paths = [p.rstrip("/") for p in sorted(listed)]
        # Object stores list paths without their protocol; HTTP lists whole URLs (links of the listing page).
        return [p if "://" in p else f"{protocol}://{p}" for p in paths if fs.exists(p + "/zarr.json")]
    base = local_path(root)
    if not os.path.isdir(base):
        return []
    return [os.path.join(base, n) for n in sorted(os.listdir(base))
            if _holds_metadata(os.path.join(base, n)) and not _being_removed(n)]


def _holds_metadata(folder: str) -> bool:
    """Whether ``folder`` holds a zarr.json, or may: one named as entries are that this user may not look
    into is listed, to be named unreadable (os.path.isfile said no, and `ls` passed it over in silence)."""
    try:
        return stat.S_ISREG(os.stat(os.path.join(folder, "zarr.json")).st_mode)
    except PermissionError:
        return bool(ENTRY_NAME.match(os.path.basename(folder)))
    except (OSError, ValueError):  # not there, or not a folder: no entry
        return False


def entries_keyed(root: str, key: str) -> list[str]:
    """The entries under ``root`` whose key is ``key``, however their folders are named (the model's and
    the data's names are in the name, not in the key)."""
    return [p for p in _children(root) if p.rstrip("/").endswith("__" + key)]


def entry_status(path: str, *, size: bool = True, group=None) -> EntryStatus:
    """``group``: the entry's group when the caller holds it open already (it is not opened again)."""
    group = open_group(path, mode="r") if group is None else group
    attrs = dict(group.attrs)
    if not attrs.get("format_version"):
        raise NotAnEntryError(f"{path} is not a layerfuse entry")
    newer = newer_format(path, attrs["format_version"])
    if newer:
        raise NewerFormatError(newer)
    # Planned splits first, in the order asked for; one not even started is missing all the same.
    splits, finished = {name: False for name in attrs.get(PLAN) or []}, []
    for name, g in subgroups(group):
        if "kind" in g.attrs:  # not a split: the MLM entry's `lm` group (embeddings, LM head)
            continue
        done = bool(g.attrs.get("complete"))
        splits[name] = done
        if done and g.attrs.get("finished"):
            finished.append(g.attrs["finished"])
    fields = {f: attrs[f] for f in KEY_FIELDS + OPTIONAL_KEY_FIELDS + MASKING_FIELDS if f in attrs}
    fields["task"] = attrs.get("task", DEFAULT_TASK)
    return EntryStatus(path=path, model=attrs.get("model", "?"), dataset=attrs.get("dataset", "?"), splits=splits,
                       finished=max(finished, key=finished_seconds) if finished else None,
                       bytes_on_disk=bytes_on_disk(path) if size else None, fields=fields,
                       primary_labels=label_sets.primary_name(attrs))


def options_label(fields: dict) -> str:
    """The options that tell entries apart, compactly: ``word/first float16 fp32-forward max 512``."""
    rows = fields.get("granularity", "?")
    if fields.get("pooling") not in (None, "none"):
        rows += f"/{fields['pooling']}"
    if fields.get("special_tokens"):
        rows += "+special"
    masked = "".join(f" {name.replace('_', '-')} {fields[name]}" for name in MASKING_FIELDS if name in fields)
    return (f"{rows} {fields.get('dtype', '?')} {fields.get('precision', '?')}-forward "
            f"max {fields.get('max_length', '?')}{masked}")


def told_apart(entry: EntryStatus, entries) -> str:
    """What tells ``entry`` from those of ``entries`` of the same model, dataset and options: the model's
    revision (a folder whose files changed) and the data's fingerprint (files edited in place, or read with
    other --columns), shortened; "" when nothing needs to."""
    twins = [e for e in entries if (e.model, e.dataset, options_label(e.fields)) ==
             (entry.model, entry.dataset, options_label(entry.fields))]
    shown = ""
    for name, said in (("model_revision", "revision"), ("dataset_fingerprint", "data")):
        if len({e.fields.get(name) for e in twins}) > 1:
            shown += f" {said} {str(entry.fields.get(name))[:24]}"
    return shown


def variants(root: str, fields: dict) -> list[EntryStatus]:
    """Entries under ``root`` of the same model, revision, dataset content and task as ``fields``
    (another entry's, or the one `extract` would make), newest first; sizes are not read."""
    same = ("model", "model_revision", "dataset_fingerprint", "task")
    if is_content_revision(fields.get("model_revision")):  # a local folder: its content is the model,
        same = same[1:]  # whatever its folder is named (a colleague's copy renamed is the same model)
    want = {f: fields.get(f, DEFAULT_TASK if f == "task" else None) for f in same}
    return [e for e in list_entries(root, sizes=False) if all(e.fields.get(f) == want[f] for f in same)]


def differences(fields: dict, other: dict, names=OPTION_FIELDS + OPTIONAL_KEY_FIELDS) -> dict:
    """{name: other's value} for each of ``names`` where ``other`` differs from ``fields``."""
    return {n: other.get(n) for n in names if other.get(n) != fields.get(n)}


def latest_complete(root: str) -> EntryStatus | None:
    for e in list_entries(root):
        if e.complete:
            return e
    return None


def bytes_on_disk(path: str) -> int | None:
    if path.startswith(("http://", "https://")):  # listing pages carry no sizes (`serve` gives them in /api/entries)
        return None
    if is_remote(path):
        import fsspec

        fs, base = fsspec.core.url_to_fs(path)
        # Listings are cached per filesystem: one read before another writer (zarr's own instance, a resumed
        # extract) added objects would count a stale list, or fail on an object it lists as absent. All of it:
        # s3fs drops a path's parents from the cache, not the folders below it.
        fs.invalidate_cache()
        return int(fs.du(base)) if fs.exists(base) else None
    total = 0
    for r, _, files in os.walk(local_path(path)):
        total += sum(_file_size(os.path.join(r, f)) for f in files)
    return total


def _file_size(path: str) -> int:
    """A file's size (a link's target's, as the data it holds), 0 for one gone since the folder was listed:
    an extract renames its partial files away meanwhile, and a dangling link (a copied entry) points
    nowhere. Either made `gc` of the whole root fail, and `ls` call a whole entry unreadable."""
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def is_damaged_entry(path: str) -> bool:
    """Whether ``path`` is an entry that cannot be read: a zarr.json of it is corrupt, and its folder is
    named as `layout.entry_path` names entries (what `rm` removes unread, as `gc` does); False for an
    entry that reads. Anything else raises: no entry there, a zarr group that is not an entry, or a
    damaged folder named otherwise (a corrupt zarr.json no longer tells whose folder it is: the name does)."""
    try:
        entry_status(path, size=False)
        return False
    except CorruptMetadataError:
        if not ENTRY_NAME.match(posixpath.basename(local_path(path).rstrip("/"))):
            raise
        return True


def refuse_link(path: str) -> None:
    """A link to an entry is no entry to remove: renamed and then refused by rmtree, it vanished from `ls`,
    a lock file beside it."""
    link = local_path(path).rstrip("/")
    if not is_remote(path) and os.path.islink(link):
        raise LayerfuseError(f"{path} is a link to {os.path.realpath(link)}: `layerfuse rm` removes entries, not "
                             "links; remove the link itself with rm, or the entry with `layerfuse rm` on its folder")


def remove(path: str, *, readable: bool = True) -> None:
    """Delete the entry ``path``; a local one only while no reader has it open and no `extract`
    writes it (`usage.exclusive`), else `usage.EntryInUse` says who has it and nothing is deleted.
    ``readable``: False for an entry whose metadata cannot be read (`gc.damaged` or `is_damaged_entry` found it one)."""
    from .usage import EntryInUse, being_written, exclusive

    if readable:
        entry_status(path)  # refuse to delete anything that is not an entry
    if is_remote(path):
        import fsspec

        fs, p = fsspec.core.url_to_fs(path)
        fs.rm(p, recursive=True)
        return
    refuse_link(path)
    refuse_unremovable(path)
    if being_written(path):  # before the lock: a removal that will not happen never turns a reader away
        raise EntryInUse(path, "being written by an extract")
    with exclusive(path), writer_lock(path):  # held until the directory is gone: a reader opening it meanwhile
        # waits, then fails; an extract (adding a label set, say) waits too, where it took its folder from
        # under the removal between a check and the rename
        # renamed first, in one step: a removal killed half-way leaves a folder `gc` knows for garbage,
        # never an entry missing some files that `ls` passes by in silence
        trash = removal_folder(path)
        os.rename(local_path(path), trash)
        _rmtree_naming_files(trash)
    for sidecar in (".lock", ".read"):  # the writer's lock and the record of reads (`usage`)
        leftover = local_path(path).rstrip("/") + sidecar
        if os.path.exists(leftover):
            os.remove(leftover)


class NotRemovable(LayerfuseError):
    """A local entry this user may not delete: refused before anything is renamed (`removal_blocker`)."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path} cannot be removed: {reason}")
        self.reason = reason


def removal_blocker(path: str) -> str | None:
    """Why this user cannot delete the local entry ``path`` (a folder of it, or the root holding it, they may
    not write in), or None. Asked before the rename: a removal that then failed half-way on permissions left
    the entry hidden under its removal name, and the next `gc` deleted it as what a killed removal left."""
    folder = local_path(path).rstrip("/")
    root = os.path.dirname(folder) or "."
    if not os.access(root, os.W_OK | os.X_OK):  # the rename, and the lock and record of reads beside the entry
        return f"no write permission on {root} for this user"
    for here in _folders(folder):  # rmtree lists, then empties, every folder of it
        if not os.access(here, os.R_OK | os.W_OK | os.X_OK):
            return f"no read, write and search permission on {here} for this user"
    return None


def _folders(folder: str):
    """``folder`` and every folder below it, one it cannot list too (links are not followed: rmtree removes
    a link, not what it points to)."""
    yield folder
    for here, dirs, _ in os.walk(folder):
        yield from (os.path.join(here, d) for d in dirs if not os.path.islink(os.path.join(here, d)))


def refuse_unremovable(path: str) -> None:
    """`NotRemovable` naming the folder that keeps this user from deleting the local entry ``path``."""
    reason = None if is_remote(path) else removal_blocker(path)
    if reason is not None:
        raise NotRemovable(path, reason)


def _rmtree_naming_files(folder: str) -> None:
    """shutil.rmtree, its error naming the whole path of the file it failed on (its own named it relative to
    its folder: "Permission denied (zarr.json)")."""
    def named(path: str, exc: BaseException):
        if isinstance(exc, OSError):
            raise type(exc)(exc.errno, exc.strerror, path) from None
        raise exc

    if sys.version_info >= (3, 12):
        shutil.rmtree(folder, onexc=lambda func, path, exc: named(path, exc))
    else:
        shutil.rmtree(folder, onerror=lambda func, path, info: named(path, info[1]))


@contextlib.contextmanager
def writer_lock(path: str):
    """The entry's writer lock (an extract's, `lock.EntryLock`), taken at once or `usage.EntryInUse`: what
    removes an entry's folder holds it, so an extract never loses the folder it has started writing."""
    from filelock import FileLock, Timeout

    from .usage import EntryInUse

    lock = FileLock(local_path(path).rstrip("/") + ".lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise EntryInUse(path, "being written by an extract") from None
    try:
        yield
    finally:
        lock.release()


REMOVING = ".removing-"  # the name a local entry takes while `remove` deletes it: `.NAME.removing-PID`


def _being_removed(name: str) -> bool:
    """Whether a folder under a root is an entry `remove` renamed to delete it (see `removal_folder`)."""
    return name.startswith(".") and REMOVING in name


def removal_folder(path: str) -> str:
    """Where ``remove`` moves a local entry before deleting it: a hidden name beside it."""
    folder, name = os.path.split(local_path(path).rstrip("/"))
    return os.path.join(folder, f".{name}{REMOVING}{os.getpid()}")


def verify(path: str, *, progress: bool = False) -> list[str]:
    """Read every chunk of every array; return one message per unreadable or corrupt chunk, then one
    per split and layer whose hidden states hold non-finite values (a checksum only proves the bytes
    are the ones written: an overflow stored as inf passes it), or, in int8 entries, non-finite scales."""
    with strays_unsaid():
        return _verify(path, progress=progress)


def _verify(path: str, *, progress: bool) -> list[str]:
    from tqdm.auto import tqdm

    group = open_group(path, mode="r")
    codec = codec_of(group.attrs.get("dtype") or DEFAULT_DTYPE)
    problems = _metadata_problems(path, group)
    problems += [f"{path}: split {name} was asked for and is not finished (rerun `extract` to finish it)"
                 for name in entry_status(path, size=False).missing]
    non_finite: dict[tuple[str, int], int] = {}
    bad_scales: dict[tuple[str, int], int] = {}  # int8 entries
    arrays = []
    for split, g in subgroups(group):
        for name, arr in g.arrays():
            edited = _declared_rows_problem(path, split, g, name, arr)
            if edited is None:
                arrays.append((split, name, arr))
            elif edited and edited not in problems:  # not read: named instead
                problems.append(edited)
    for split, name, arr in tqdm(arrays, desc="verify", disable=not progress, leave=False):
        hidden = name == "hidden" and arr.ndim == 3
        scales = name == SCALES  # scaled formats (int8): a non-finite scale makes its whole vector non-finite
        for sel, label in _chunk_selections(arr):
            try:
                data = np.asarray(arr[sel])
            except MissingChunkError:  # reported once per file by `_missing_files`
                continue
            except Exception as exc:  # zarr raises codec-specific errors on a checksum mismatch
                problems.append(f"{path}: array {split}/{name}, chunk {label}: "
                                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                continue
            if hidden:
                n = codec.count_non_finite(data)
                if n:  # chunks hold one layer each; count per layer all the same in case they ever do not
                    for layer in range(sel[1].start, sel[1].stop):
                        k = codec.count_non_finite(data[:, layer - sel[1].start])
                        if k:
                            non_finite[split, layer] = non_finite.get((split, layer), 0) + k
            if scales:
                bad = np.count_nonzero(~np.isfinite(data), axis=0)  # [layers in the chunk]
                for layer in np.flatnonzero(bad):
                    key = split, sel[1].start + int(layer)
                    bad_scales[key] = bad_scales.get(key, 0) + int(bad[layer])
    for (split, layer), n in sorted(non_finite.items()):
        problems.append(f"{path}: split {split}, layer {layer} (0 = embeddings): {n:,} non-finite hidden values "
                        f"(inf or nan)")
    for (split, layer), n in sorted(bad_scales.items()):
        problems.append(f"{path}: split {split}, layer {layer} (0 = embeddings): {n:,} non-finite int8 scales "
                        f"(inf or nan: those vectors read back non-finite)")
    return problems


def quick_check(path: str) -> list[str]:
    """What `verify` finds without reading a chunk: every file a finished split (or label set) lists as
    written is there, and every array's metadata is what was recorded when it was written. Cheap (a stat
    per chunk file, the metadata files read): what `ls` and `info` check before calling an entry complete;
    a flipped byte inside a chunk, or a non-finite value, is left to `verify`."""
    group = open_group(path, mode="r")
    with strays_unsaid():
        return _metadata_problems(path, group)


def _metadata_problems(path: str, group) -> list[str]:
    """`_missing_files` and `manifest.problems`, for `quick_check` and `verify`."""
    try:
        return _missing_files(path, group) + manifest.problems(path, group, group.attrs.get(label_sets.LISTING) or {})
    except (TypeError, AttributeError, ValueError, KeyError, LayerfuseError) as exc:
        # metadata of another shape than layerfuse writes (a list where a listing goes, a string for a file
        # list): damage to name, as every other, not a traceback that hid the root's other entries
        return [f"{path}: its metadata is not as written ({type(exc).__name__}: {str(exc)[:200]})"]


ROW_ARRAYS = ("hidden", SCALES, "labels", "word_index")  # one row per row of the split


def _declared_rows_problem(path: str, split: str, g, name: str, arr) -> str | None:
    """Whether array ``name`` of split group ``g`` declares another length than the split records (an edited
    shape: a grid of 2**38 rows made `ls` list billions of shard keys and `verify` read them): "" when
    `manifest` names the change already (the shape recorded at the split's end differs), the message when
    only this check can tell, None when the length is as recorded or the array is not one it knows."""
    attrs = g.attrs
    n_rows, unit = attrs.get("n_rows"), attrs.get("unit_rows")
    sentences = attrs.get("n_sentences")
    expected = {"offsets": sentences + 1 if isinstance(sentences, int) else None, "words": attrs.get("n_words"),
                "done": -(-n_rows // unit) if isinstance(n_rows, int) and isinstance(unit, int) and unit else None}
    want = expected.get(name, n_rows if name in ROW_ARRAYS or name.startswith(label_sets.ARRAY_PREFIX) else None)
    if not isinstance(want, int) or "kind" in attrs or arr.shape[0] == want:
        return None
    recorded = ((attrs.get(manifest.ARRAYS) or {}).get(name) or {}).get("shape")
    if recorded is not None and list(recorded) != list(arr.shape):
        return ""
    return f"{path}: array {split}/{name} declares {arr.shape[0]:,} rows, the split records {want:,}"


def _missing_files(path: str, group) -> list[str]:
    """One message per array or chunk file that a complete split (or label set, or the ``lm`` group)
    lists as written and that is gone; registers the lists so reads of those chunks fail, not zero."""
    from zarr.core.sync import sync

    store = checked_store(group)
    sets = group.attrs.get(label_sets.LISTING) or {}
    problems = []
    for split, g in subgroups(group):
        if not g.attrs.get("complete"):
            continue
        files = dict(g.attrs.get("files") or {})
        for name, info in sets.items():
            if split in (info.get("files") or {}):
                files[label_sets.array_name(dict(group.attrs), name)] = info["files"][split]
        outside = [f"{name}/{key}" for name, keys in files.items() for key in keys
                   if not isinstance(key, str) or key.startswith("/") or ".." in key.split("/")]
        if outside:  # the store is asked whether they exist: never about a path outside the entry
            problems.append(f"{path}: split {split} lists files outside it ({', '.join(map(str, outside[:3]))}): "
                            "its metadata was edited")
            continue
        # every shard of hidden is written: one lost before the split was finished (older versions), or by an
        # entry finished before files were listed at all, is named, not read as zeros
        if "hidden" in g and ("hidden" in files or "files" not in g.attrs):
            edited = _declared_rows_problem(path, split, g, "hidden", g["hidden"])
            if edited is not None:  # its grid of shards could be billions of keys: not listed
                problems += [edited] if edited else []
                continue
            files["hidden"] = sorted(set(files.get("hidden", [])) | set(shard_keys(g["hidden"])))
        store.expect(split, files)
        arrays = {name for name, _ in g.arrays()}
        for name, keys in sorted(files.items()):
            if name not in arrays:
                problems.append(f"{path}: array {split}/{name} is missing (no {split}/{name}/zarr.json)")
                continue
            for key in keys:
                if not sync(store.exists(f"{split}/{name}/{key}")):
                    problems.append(f"{path}: array {split}/{name}, chunk {key} is missing "
                                    f"(file {split}/{name}/{key})")
        if "hidden" in arrays and "hidden" in files:  # a stat per shard: one cut short is no whole shard
            problems += [f"{path}: array {split}/hidden, chunk c/{block}/0/0 is cut short (file {split}/hidden/c/"
                         f"{block}/0/0 is not a whole shard's size)" for block in cut_shards(g["hidden"])]
    return problems


def _chunk_selections(arr):
    """One selection per inner chunk, so a corrupt chunk is named exactly."""
    chunks = arr.chunks
    shape = arr.shape
    grids = [range(0, max(s, 1), c) for s, c in zip(shape, chunks)]
    import itertools

    for starts in itertools.product(*grids):
        sel = tuple(slice(a, min(a + c, s)) for a, c, s in zip(starts, chunks, shape))
        label = "(" + ", ".join(str(a // c) for a, c in zip(starts, chunks)) + ")"
        if any(s == 0 for s in shape):
            return
        yield sel, label
