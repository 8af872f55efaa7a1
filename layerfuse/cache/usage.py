"""Who uses an entry: the record of its last read (what eviction orders by), and the locks that
keep an entry from being deleted under a reader.

A read is recorded as the modification time of a sidecar file ``<entry>.read`` beside the entry
(the way ``<entry>.lock`` marks a writer), at most once a minute per entry and process, so a hot
loop of reads costs no writes. It orders eviction; it protects nothing.

What protects a reader is a lock. A process that has a local entry open (`reader.CacheEntry`, the
server while it sends one of its files) holds a shared ``flock`` on the entry's directory for as
long as it is open; `gc` and `rm` take it exclusively, without waiting, and skip the entry (saying
why) when they cannot. The kernel drops a lock when its holder closes it or dies, so a killed
reader never blocks a removal. Object-store and HTTP roots hold no locks: their readers are other
machines.
"""

from __future__ import annotations

import contextlib
import os
import time
import weakref

try:
    import fcntl
except ImportError:  # no flock on this platform: entries are held by nobody
    fcntl = None

from ..errors import LayerfuseError
from ..files import NO_LOCKS, LocksUnsupported, check_lockable
from .layout import is_remote, local_path

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
        with open(_sidecar(path), "a"):  # made 0o666 less the umask: a group sharing the root records its reads
            pass
        # the current time, not given: setting given times needs the file's owner, the current one only write
        # access, so a colleague's reads were never recorded and gc evicted an entry in use
        os.utime(_sidecar(path))
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
    """True while an `extract` holds the entry's lock (`lock.EntryLock`, a file lock beside it); `EntryInUse`
    when this user may not open that lock, so cannot tell: the entry is kept, and the others looked at."""
    from filelock import FileLock, Timeout

    lock_path = local_path(path).rstrip("/") + ".lock"
    if is_remote(path) or not os.path.exists(lock_path):
        return False
    try:
        check_lockable(lock_path)  # without locks: said, where gc said "being written" of every entry
    except PermissionError:
        raise EntryInUse(path, f"perhaps being written: this user may not open its lock {lock_path}") from None
    except LocksUnsupported:
        raise EntryInUse(path, f"cannot tell whether an extract writes it: the file system of {lock_path} does "
                               "not support file locks; remove it by hand once no one writes or reads it") from None
    probe = FileLock(lock_path)
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return True
    except PermissionError:  # a colleague's lock, private to them: it alone once stopped gc for the whole root
        raise EntryInUse(path, f"perhaps being written: this user may not open its lock {lock_path}") from None
    probe.release()
    return False


def perhaps_written(path: str) -> bool:
    """Whether an `extract` writes ``path``, or may: this user cannot open its lock to tell."""
    try:
        return being_written(path)
    except EntryInUse:
        return True


def in_use(path: str) -> bool:
    """True while a reader has ``path`` open or an `extract` is writing it."""
    return busy(path) is not None


def busy(path: str) -> str | None:
    """Why ``path`` may not be removed now (a reader has it open, an `extract` is writing it), or None.
    Only looks: the kernel's lock table is read, no lock taken, so a reader opening the entry meanwhile
    is never turned away (where the system keeps no such table, the lock is tried for an instant)."""
    try:
        if being_written(path):
            return "being written by an extract"
    except EntryInUse as exc:  # cannot tell
        return exc.reason
    fd = _open_dir(path)
    held = None if fd is None else _holders(fd)
    if fd is not None:
        os.close(fd)
    if held is None:
        try:
            with exclusive(path):
                return None
        except EntryInUse as exc:
            return exc.reason
    if held["WRITE"]:
        return "being removed"
    if held["READ"]:
        return f"open by a reader (process {', '.join(map(str, held['READ']))})"
    return None


def readers_of(path: str) -> list[int] | None:
    """Process ids that hold the local entry ``path`` open (its shared lock), read without taking any lock;
    None where the system does not say (no lock table, a remote entry)."""
    fd = _open_dir(path)
    if fd is None:
        return None
    try:
        held = _holders(fd)
    finally:
        os.close(fd)
    return None if held is None else held["READ"] + held["WRITE"]


class EntryInUse(LayerfuseError):
    """An entry that cannot be removed now; ``reason`` says who has it."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path} is {reason}; not removed")
        self.reason = reason


class ReadHold:
    """A shared lock on an entry's directory, released by `release` or when the hold is garbage
    collected (whichever comes first): a reader holds the entry for as long as it keeps this."""

    def __init__(self, fd: int | None):
        self._close = weakref.finalize(self, os.close, fd) if fd is not None else None

    def release(self) -> None:
        if self._close is not None:
            self._close()

    @property
    def held(self) -> bool:
        return self._close is not None and self._close.alive

    def __deepcopy__(self, memo) -> ReadHold:  # a copy of a reader reads the same open entry
        return self

    def __reduce__(self):  # a lock does not travel to another process: it arrives released
        return ReadHold, (None,)


def hold(path: str, *, wait: bool = True) -> ReadHold | None:
    """A shared lock on the local entry ``path`` (None for remote entries, for a path that is no
    directory, where the platform has no flock). ``wait=False``: raise `EntryInUse` instead of
    waiting while a removal holds it. Raises `LayerfuseError` when the entry went while waiting."""
    fd = _open_dir(path)
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | (0 if wait else fcntl.LOCK_NB))
        if os.fstat(fd).st_ino != os.stat(local_path(path)).st_ino:
            raise FileNotFoundError
    except BlockingIOError:
        os.close(fd)
        raise EntryInUse(path, "being removed") from None
    except FileNotFoundError:
        os.close(fd)
        raise LayerfuseError(f"{path} was removed (gc or rm) while it was being opened") from None
    except OSError:  # a file system without flock (some network mounts): read unprotected, as before
        os.close(fd)
        return None
    return ReadHold(fd)


@contextlib.contextmanager
def exclusive(path: str):
    """The entry's lock, exclusively and without waiting, for a removal: raises `EntryInUse` naming
    the readers' process ids (where the system says) when a reader holds it."""
    fd = _open_dir(path)
    if fd is None:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pids = readers(fd)
            who = f" (process {', '.join(map(str, pids))})" if pids else ""
            raise EntryInUse(path, f"open by a reader{who}") from None
        except OSError as exc:  # cannot tell who reads it: keep it
            why = "its file system does not support file locks: remove it by hand once no one reads it" \
                if exc.errno in NO_LOCKS else exc.strerror
            raise EntryInUse(path, f"not lockable here ({why})") from None
        yield
    finally:
        os.close(fd)


def readers(fd: int) -> list[int]:
    """Process ids holding a shared flock on the file of ``fd``, from /proc/locks (Linux; [] elsewhere).
    The ids are those of the processes that took the locks, as the kernel records them."""
    return (_holders(fd) or {"READ": []})["READ"]


def _holders(fd: int) -> dict[str, list[int]] | None:
    """{"READ": pids, "WRITE": pids} of the flocks held on the file of ``fd``, from /proc/locks; None
    where it cannot be read (not Linux)."""
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    held = {"READ": set(), "WRITE": set()}
    for line in lines:
        cols = line.split()  # a waiter's line reads "N: -> FLOCK ...": it holds nothing and is skipped
        if len(cols) >= 6 and cols[1] == "FLOCK" and cols[3] in held and cols[5] == inode:
            held[cols[3]].add(int(cols[4]))
    return {mode: sorted(pids) for mode, pids in held.items()}


def _open_dir(path: str) -> int | None:
    if fcntl is None or is_remote(path):
        return None
    try:
        return os.open(local_path(path), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # not there (the caller's open says so) or not a directory
        return None
