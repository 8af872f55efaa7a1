"""When an entry was last read, and whether it is in use: what eviction (`gc`) and the service's
listing need.

A read is recorded as the modification time of a sidecar file ``<entry>.read`` beside the entry
(the way ``<entry>.lock`` marks a writer), at most once a minute per entry and process, so a hot
loop of reads costs no writes. Local roots only: an object-store root records nothing.

"In use" is decided without a reader registry, which remote readers (HTTP, other machines) could
not keep: an entry is in use while a writer holds its lock, or when it was read in the last
``IN_USE_SECONDS``.
"""

from __future__ import annotations

import os
import time

from .layout import is_remote, local_path

IN_USE_SECONDS = 600.0  # a read this recent means a trainer may still be reading: never evict it
_RECORD_EVERY = 60.0  # seconds between two recorded reads of one entry by one process
_recorded: dict[str, float] = {}


def _sidecar(path: str) -> str:
    return local_path(path).rstrip("/") + ".read"


def mark_read(path: str) -> None:
    """Record that ``path`` (an entry) was read now."""
    if is_remote(path):
        return
    now = time.time()
    if now - _recorded.get(path, 0.0) < _RECORD_EVERY:
        return
    _recorded[path] = now
    try:
        with open(_sidecar(path), "a"):
            pass
        os.utime(_sidecar(path), (now, now))
    except OSError:  # a read-only root: reading must still work
        pass


def last_read(path: str) -> float | None:
    """Seconds since the epoch of the last recorded read, None if never (or remote)."""
    if is_remote(path):
        return None
    try:
        return os.path.getmtime(_sidecar(path))
    except OSError:
        return None


def being_written(path: str) -> bool:
    """True while an `extract` holds the entry's lock (`lock.EntryLock`, a file lock beside it)."""
    from filelock import FileLock, Timeout

    lock_path = local_path(path).rstrip("/") + ".lock"
    if is_remote(path) or not os.path.exists(lock_path):
        return False
    probe = FileLock(lock_path)
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return True
    probe.release()
    return False


def in_use(path: str, *, now: float | None = None) -> bool:
    read = last_read(path)
    recent = read is not None and (now or time.time()) - read < IN_USE_SECONDS
    return recent or being_written(path)
