"""One whole shard of ``hidden`` written straight to a local file: the bytes zarr's sharding codec
writes (same chunk order, checksums and index), without its per-chunk pipeline.

Why (`scripts/bench_shard_write.py`, one 176 MB MiniLM shard on a 2-core EPYC): zarr's pipeline
spent 0.7-0.9 s of CPU on it (0.5 s with its fill-value comparison off: each inner chunk copied,
compared with the fill value, copied again to append its checksum, the shard joined by a third
copy); this spends 0.06 s through the page cache and 0.02 s with O_DIRECT. During extraction that
CPU is taken from the forward pass's two threads: extraction ran at 0.83 of the forward-only floor
with zarr writing, 0.94 with nothing written, 0.89-0.90 with this change alone.

Only for the layout `writer._create_split` makes (inner chunks of whole rows of one layer; bytes,
little-endian where a value has more than one, then crc32c; the index, also checksummed, at the
end) on a local store; any other array or store goes through zarr. Readers are zarr itself, which
checks every checksum; a test compares these bytes with zarr's own for full and partial shards.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
from pathlib import Path

import google_crc32c
import numpy as np

from ..errors import LayerfuseError
from ..lifeline import exists

EMPTY = np.uint64(2**64 - 1)  # index entry of a chunk that is not stored
PAGE = 4096  # O_DIRECT wants buffers, offsets and lengths in whole pages
PLAIN = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
PLAIN_BYTES = [{"name": "bytes"}, {"name": "crc32c"}]  # one-byte values (int8): zarr names no byte order


def shard_files(array) -> ShardFiles | None:
    """A `ShardFiles` for ``array`` when it has the cache's layout on a local store, else None."""
    layout = _layout(array)
    return None if layout is None else ShardFiles(array, shard_rows=layout[0], inner_rows=layout[1])


def _layout(array, *, store=None) -> tuple[int, int] | None:
    """(rows per shard, rows per inner chunk) of the cache's layout, on a local store (``store``: the one
    under a reader's wrapper, else the array's own), else None."""
    from zarr.storage import LocalStore

    if not isinstance(store or array.store, LocalStore) or array.ndim != 3:
        return None
    meta = json.loads(json.dumps(array.metadata.to_dict(), default=str))  # as in zarr.json: lists, not tuples
    codecs = meta.get("codecs", [])
    if len(codecs) != 1 or codecs[0].get("name") != "sharding_indexed":
        return None
    conf = codecs[0]["configuration"]
    inner_codecs = PLAIN_BYTES if array.dtype.itemsize == 1 else PLAIN
    if conf.get("codecs") != inner_codecs or conf.get("index_codecs") != PLAIN or conf.get("index_location") != "end":
        return None
    shard, inner = meta["chunk_grid"]["configuration"]["chunk_shape"], conf["chunk_shape"]
    if inner[1] != 1 or inner[2] != shard[2] or shard[2] != array.shape[2] or shard[1] != array.shape[1]:
        return None
    if shard[0] % inner[0] or meta.get("chunk_key_encoding", {}).get("configuration", {}).get("separator") != "/":
        return None
    return int(shard[0]), int(inner[0])


class ShardFiles:
    """Writes whole shards of one ``array`` (of the layout `shard_files` accepts) as files.

    Each shard is built in one page-aligned buffer that the process keeps for the next (fresh
    memory costs a page fault per 4 KiB: 0.37 s for 176 MB here; the price is one shard's size
    held) and written with O_DIRECT where the file system takes it, which keeps the kernel's copy
    into the page cache off the CPU. Elsewhere (tmpfs, other systems) it is an ordinary write."""

    def __init__(self, array, *, shard_rows: int, inner_rows: int, direct: bool = True):
        self.array, self.shard_rows, self.inner_rows = array, shard_rows, inner_rows
        self.direct = direct  # O_DIRECT where taken; False: through the page cache (for comparison)

    def write(self, shard: int, rows: np.ndarray) -> None:
        """Store ``rows`` ``[n, layers, d]`` (n = shard_rows, fewer for the array's last shard) as
        shard number ``shard``; the file is replaced whole, never seen half-written."""
        rows = np.asarray(rows, dtype=self.array.dtype)
        size = shard_size(rows.shape[0], rows.shape[1:], itemsize=rows.dtype.itemsize, shard_rows=self.shard_rows,
                          inner_rows=self.inner_rows)
        path = Path(self.array.store.root) / self.array.path / self.array.metadata.encode_chunk_key((shard, 0, 0))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}{PARTIAL}")
        try:
            with _BUFFER_LOCK:  # one buffer per process, shared by every split and entry written
                out = _aligned(size)
                encode_shard(rows, out, shard_rows=self.shard_rows, inner_rows=self.inner_rows,
                             fill=self.array.fill_value)
                _write_file(tmp, out, size, direct=self.direct)
            os.replace(tmp, path)
        except OSError as exc:  # a full disk above all: the half-written file would hold its space
            tmp.unlink(missing_ok=True)
            if exc.errno == errno.ENOSPC:
                raise DiskFullError(path, size) from None
            raise OSError(exc.errno, exc.strerror, str(path)) from None  # a size limit, a quota: name the shard


class DiskFullError(LayerfuseError, OSError):
    """No room for one shard: names the file and the bytes it needs, and what is free there."""

    def __init__(self, path: Path, size: int):
        try:
            free = f"{_size(shutil.disk_usage(path.parent).free)} is free"
            inodes = os.statvfs(path.parent)  # f_files 0: a file system with no inode table (btrfs)
            if inodes.f_files and inodes.f_favail == 0:  # ENOSPC with bytes to spare: no file can be made
                free = "no inodes are free (no new file can be made there, whatever the bytes free)"
        except OSError:
            free = "the free space is unknown"
        super().__init__(errno.ENOSPC, f"No space left on device writing {path}: the shard needs {_size(size)} "
                                       f"and {free}; free space and rerun the same command to resume", str(path))

    def __str__(self) -> str:
        return self.strerror


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


PARTIAL = ".partial"  # `.<shard>.<pid>.partial`: a shard being written, renamed into place once whole


def remove_stale_partials(array_dir: str | os.PathLike) -> list[Path]:
    """Delete the half-written shard files under ``array_dir`` (the ``hidden`` folder of a split) left
    by writers that are gone (killed, or failed before their cleanup ran); a live process's are
    kept. Returns what was removed."""
    removed = []
    for tmp in Path(array_dir).glob(f"c/**/.*{PARTIAL}"):
        pid = tmp.name[: -len(PARTIAL)].rsplit(".", 1)[-1]
        if pid.isdecimal() and exists(int(pid)):
            continue
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


_BUFFER = np.empty(0, dtype=np.uint8)
_BUFFER_LOCK = threading.Lock()


def _aligned(size: int) -> np.ndarray:
    """The process's page-aligned shard buffer, grown to at least ``size`` bytes in whole pages."""
    global _BUFFER
    need = -(-size // PAGE) * PAGE
    if _BUFFER.size < need:
        raw = np.empty(need + PAGE, dtype=np.uint8)
        start = -raw.ctypes.data % PAGE
        _BUFFER = raw[start:start + need]
    return _BUFFER[:need]


def _write_file(path: Path, out: np.ndarray, size: int, *, direct: bool = True) -> None:
    """The first ``size`` bytes of ``out`` (page-aligned, whole pages long) into a new file."""
    direct = getattr(os, "O_DIRECT", 0) if direct else 0
    if direct:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | direct, 0o666)
        except OSError:  # the file system does not take O_DIRECT
            fd = None
        if fd is not None:
            try:
                written = os.write(fd, memoryview(out))  # whole pages; the padding is cut off below
                if written == out.size:
                    os.ftruncate(fd, size)
                    return
            except OSError:  # e.g. a file system that opens with O_DIRECT but will not write so: try again below
                pass
            finally:
                os.close(fd)
    with open(path, "wb") as f:
        f.write(memoryview(out[:size]))


def cut_shards(array) -> list[int]:
    """The row blocks of ``array`` (of the layout `shard_files` accepts) whose shard file is there but not
    the size a whole shard of its rows has: cut by a crash after its unit was flagged written, or since.
    A stat per shard; other arrays and stores: none found."""
    from zarr.storage import WrapperStore

    store = array.store
    while isinstance(store, WrapperStore):  # a reader's `CheckedStore`, say
        store = store._store
    layout = _layout(array, store=store)
    if layout is None:
        return []
    shard_rows, inner_rows = layout
    n, layers, d = array.shape
    folder = Path(store.root) / array.path
    cut = []
    for block in range(-(-n // shard_rows)):
        try:
            size = (folder / array.metadata.encode_chunk_key((block, 0, 0))).stat().st_size
        except FileNotFoundError:  # gone: named as missing by whoever lists the files
            continue
        rows = min(shard_rows, n - block * shard_rows)
        if size != shard_size(rows, (layers, d), itemsize=array.dtype.itemsize, shard_rows=shard_rows,
                              inner_rows=inner_rows):
            cut.append(block)
    return cut


def shard_size(n: int, inner_shape: tuple[int, int], *, itemsize: int, shard_rows: int, inner_rows: int) -> int:
    """Bytes of a shard holding ``n`` rows: its stored chunks with their checksums, and the index."""
    layers, d = inner_shape
    stored = -(-n // inner_rows) * layers
    return stored * (inner_rows * d * itemsize + 4) + (shard_rows // inner_rows) * layers * 16 + 4


def encode_shard(rows: np.ndarray, out: np.ndarray, *, shard_rows: int, inner_rows: int, fill=0) -> None:
    """The shard's bytes into ``out`` (uint8, at least `shard_size` long): each inner chunk (padded
    with ``fill`` past the last row) and its crc32c, in zarr's chunk order, then the index
    ``[chunks, 2]`` of (offset, length) and its crc32c."""
    n, layers, d = rows.shape
    rows = rows.astype(rows.dtype.newbyteorder("<"), copy=False)
    grid = (shard_rows // inner_rows, layers, 1)
    chunk_bytes = inner_rows * d * rows.dtype.itemsize
    stored = [(r, layer) for r, layer, _ in _chunk_order(grid) if r * inner_rows < n]  # chunks past the rows: absent
    index = np.full(grid + (2,), EMPTY, dtype="<u8")
    pos = 0
    for r, layer in stored:
        chunk = out[pos:pos + chunk_bytes].view(rows.dtype).reshape(inner_rows, d)
        part = rows[r * inner_rows:(r + 1) * inner_rows, layer]  # [<= inner_rows, d]
        chunk[:len(part)] = part
        chunk[len(part):] = fill
        _put_crc(out, pos, chunk_bytes)
        index[r, layer, 0] = (pos, chunk_bytes + 4)
        pos += chunk_bytes + 4
    out[pos:pos + index.nbytes] = index.reshape(-1).view(np.uint8)
    _put_crc(out, pos, index.nbytes)


def _put_crc(out: np.ndarray, start: int, length: int) -> None:
    """The crc32c of out[start:start + length], little-endian, in the 4 bytes after it."""
    crc = google_crc32c.value(out[start:start + length])
    out[start + length:start + length + 4] = np.array([crc], dtype="<u4").view(np.uint8)


def _chunk_order(grid: tuple[int, ...]):
    """zarr's order of the chunks inside a shard (Morton), so the bytes match its own; any order
    is a valid shard (the index says where each chunk is), so C order if zarr moves it."""
    try:
        from zarr.core.indexing import morton_order_iter
    except ImportError:  # pragma: no cover - a zarr that renamed its helper
        import itertools

        return itertools.product(*(range(x) for x in grid))
    return morton_order_iter(grid)
