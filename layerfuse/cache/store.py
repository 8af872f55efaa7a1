"""Opening zarr groups on a local path or any fsspec URL zarr accepts."""

from __future__ import annotations

import itertools
import json
import os

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec
from zarr.core.group import GroupMetadata
from zarr.core.metadata import ArrayV3Metadata
from zarr.storage import WrapperStore

from ..errors import IncompleteEntryError, LayerfuseError
from .layout import is_remote, local_path
from .manifest import REPAIR

# Every chunk carries a crc32c checksum so a flipped byte is caught on read.
CHECKSUM = Crc32cCodec()
SMALL_ARRAY_CODECS = [ZstdCodec(level=3), Crc32cCodec()]


class MissingChunkError(LayerfuseError):
    """A chunk file that a complete entry lists as written is gone (deleted, lost, or a 404)."""


class CorruptMetadataError(LayerfuseError):
    """A zarr.json that is not JSON (a flipped byte, a truncated write), or not zarr metadata (a key
    renamed or gone)."""


class CheckedStore(WrapperStore):
    """A read-only store that never lets zarr's fill value stand in for data, nor a damaged zarr.json
    surface as a decoding traceback.

    zarr reads an absent chunk (a deleted file, an HTTP 404) as "never written" and returns the fill
    value. A complete split lists the chunk files it wrote (`files_of`); once the reader registers
    that list (`expect`), an absent listed key is a `MissingChunkError` naming array and chunk.
    Every zarr.json read is checked to be zarr metadata, so a corrupt one is an error naming the file."""

    def __init__(self, store, where: str = "", expected: set | None = None):
        super().__init__(store)
        self.where = where.rstrip("/")
        self.expected = set() if expected is None else expected  # shared with copies (`_with_store`)

    def _with_store(self, store):
        return type(self)(store, self.where, self.expected)

    def expect(self, prefix: str, files: dict[str, list[str]]) -> None:
        """Register the chunk keys of arrays under ``prefix`` (``train``): {array: [``c/0/0/0``, ...]}."""
        self.expected.update(f"{prefix}/{name}/{key}" for name, keys in files.items() for key in keys)

    def _checked(self, key: str, buf):
        if buf is None:
            if key in self.expected:
                array, _, chunk = key.partition("/c/")
                raise MissingChunkError(f"{self.where}: array {array}, chunk c/{chunk} is missing (file {key}); "
                                        f"the entry lists it as written: {REPAIR}")
            return None
        if key.endswith("zarr.json"):
            why = _not_metadata(buf.to_bytes())
            if why:
                raise CorruptMetadataError(f"{self.where}/{key} is corrupt: {why}; remove the entry "
                                           "(`layerfuse rm`) and extract it again")
        return buf

    async def get(self, key, prototype, byte_range=None):
        return self._checked(key, await self._store.get(key, prototype, byte_range))

    async def get_partial_values(self, prototype, key_ranges):
        key_ranges = list(key_ranges)
        values = await self._store.get_partial_values(prototype, key_ranges)
        return [self._checked(key, v) for (key, _), v in zip(key_ranges, values)]

    async def _get_many(self, requests):
        for key, prototype, byte_range in requests:
            yield key, await self.get(key, prototype, byte_range)


_PARSERS = {"group": GroupMetadata.from_dict, "array": ArrayV3Metadata.from_dict}  # as zarr reads each


def _not_metadata(data: bytes) -> str | None:
    """Why ``data``, a zarr.json, is not zarr 3 metadata zarr can read (None when it is). Checked here, as
    zarr parses it: zarr fails on a renamed or missing key deep in its own code (a TypeError, a
    MetadataValidationError), in a traceback that names no file."""
    try:
        meta = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return f"not valid JSON ({_first_line(exc)})"
    # zarr reads a group's zarr.json without its zarr_format (as zarr 2 allowed), but zarr 3 wrote one
    # in every zarr.json of an entry: one without it was damaged since.
    if not isinstance(meta, dict) or meta.get("zarr_format") != 3:
        return 'not zarr metadata (no "zarr_format": 3)'
    node_type = meta.get("node_type")
    parse = _PARSERS.get(node_type) if isinstance(node_type, str) else None
    if parse is None:
        return 'not zarr metadata (no "node_type": "group" or "array")'
    try:
        parse(meta)
    except Exception as exc:  # noqa: BLE001 - zarr raises TypeError, KeyError, ValueError, its own errors
        return f"not zarr metadata ({type(exc).__name__}: {_first_line(exc)})"
    return None


def _first_line(exc: Exception) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""


def _read_store(path: str):
    """The store under ``path`` for reading, wrapped in a `CheckedStore`."""
    if is_remote(path):
        from zarr.storage import FsspecStore

        # without its trailing slash: kept, zarr listed ``ENTRY//`` and a server answered 403 to `info URL/`
        base = FsspecStore.from_url(path.rstrip("/"), read_only=True)
    else:
        from zarr.storage import LocalStore

        base = LocalStore(local_path(path), read_only=True)
    return CheckedStore(base, where=path)


def open_group(path: str, *, mode: str = "r") -> zarr.Group:
    """Open an existing group; a missing one is a LayerfuseError naming the path. Read-only groups
    sit on a `CheckedStore` (absent listed chunks and corrupt metadata are errors, not fill values)."""
    target = path if is_remote(path) else local_path(path)
    try:
        if mode == "r":
            if not is_remote(path) and not os.path.isdir(target):
                raise FileNotFoundError(target)
            return zarr.open_group(_read_store(path), mode="r")
        return zarr.open_group(target, mode=mode)
    except zarr.errors.ContainsArrayError as exc:  # an array's folder (ENTRY/train/hidden), not an entry's
        raise LayerfuseError(f"no cache entry at {path}: it is an array of one") from exc
    except (FileNotFoundError, zarr.errors.GroupNotFoundError) as exc:
        served = path.startswith(("http://", "https://"))  # a server hides an entry while an extract writes it
        why = " (a server serves complete entries only, none being extracted or extended)" if served else ""
        raise LayerfuseError(f"no cache entry at {path}{why}") from exc


def checked_store(group: zarr.Group) -> CheckedStore | None:
    """The `CheckedStore` under a group opened by `open_group` (None for any other group)."""
    store = group.store
    return store if isinstance(store, CheckedStore) else None


def exists(path: str) -> bool:
    """Whether an entry (its ``zarr.json``) is at ``path``. On an object store the object is asked for,
    and a failure to ask is an error, not "no": an entry that could not be read (a damaged zarr.json, a
    throttled or refused request) was taken for none, and `extract` created a new one over it, deleting it."""
    if is_remote(path):
        import fsspec

        fs, base = fsspec.core.url_to_fs(path)
        return bool(fs.exists(base.rstrip("/") + "/zarr.json"))
    return os.path.exists(os.path.join(local_path(path), "zarr.json"))


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 is stored as its uint16 bit pattern (numpy has no bfloat16); widen it exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16 bit pattern, as torch does."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16).view(torch.uint16).numpy()


def require_complete(group: zarr.Group, where: str) -> None:
    if not group.attrs.get("complete", False):
        raise IncompleteEntryError(
            f"{where} is incomplete (its extraction has not finished); "
            "rerun `extract` with the same options to resume it"
        )


def files_of(group: zarr.Group, names=None) -> dict[str, list[str]]:
    """{array: its stored chunk keys (``c/0/0/0``)} for the arrays of ``group`` (all, or ``names``):
    what a complete split records, so a file lost later is told from a chunk never written (zarr
    skips chunks that equal the fill value)."""
    from zarr.core.sync import sync

    async def listed(prefix: str) -> list[str]:
        return sorted([key[len(prefix) - 2:] async for key in group.store.list_prefix(prefix)])

    out = {}
    for name, array in group.arrays():
        if names is None or name in names:
            out[name] = [k for k in sync(listed(f"{array.path}/c/")) if k.startswith("c/")]
    return out


def shard_keys(array) -> list[str]:
    """The key of every object a whole ``array`` stores (``c/0/0/0``: one per shard, or per chunk when it
    is not sharded), in grid order: a finished ``hidden`` holds each one (empty chunks are written too)."""
    block = array.shards or array.chunks
    grid = (range(-(-n // b)) for n, b in zip(array.shape, block))
    return ["c/" + "/".join(map(str, index)) for index in itertools.product(*grid)]


def settle_reads(timeout: float = 5.0) -> None:
    """Cancel the reads still in flight on zarr's event loop and wait for them to end.

    A read of many chunks that fails on one (a missing chunk) leaves its other chunks' reads pending;
    a process that then exits closes the loop under them, and asyncio prints "Task was destroyed but
    it is pending" and "Event loop is closed" for each, after the one line that says what is wrong.
    Called before a command exits on an error."""
    import asyncio

    from zarr.core import sync as zarr_sync

    loop = zarr_sync.loop[0]
    if loop is None or loop.is_closed() or not loop.is_running():
        return

    async def cancel_the_rest():
        me = asyncio.current_task()
        rest = [task for task in asyncio.all_tasks() if task is not me]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    try:
        asyncio.run_coroutine_threadsafe(cancel_the_rest(), loop).result(timeout)
    except Exception:  # noqa: BLE001 - leaving on an error already: the error is the message
        pass
