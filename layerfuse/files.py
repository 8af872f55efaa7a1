"""Writing a user's files so that a kill, a full disk or a second process never leaves half of one,
nor loses one: JSON written whole or not at all, one writer at a time in a folder, and a library's
write error (safetensors' "File too large (os error 27)") raised as the `OSError` it is, naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import shutil
import signal
import stat
import threading
from contextlib import contextmanager


def finite_json(obj):
    """``obj`` with each float that is nan or inf as None: JSON has neither (Python's ``NaN`` is an extension
    other readers refuse), so records write them as null; a reader takes a null loss as not finite
    (`training.config.diverged_at`)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: finite_json(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(value) for value in obj]
    return obj


def json_text(obj, *, indent: int | None = None) -> str:
    """``obj`` as valid JSON: nan and inf as null (`finite_json`)."""
    return json.dumps(finite_json(obj), indent=indent, allow_nan=False)


def write_json(path: str, obj, *, indent: int | None = 2) -> None:
    """``obj`` as valid JSON (`json_text`) at ``path``, whole (`replaced_whole`): written beside it, flushed to
    disk, then renamed over it, so a reader (or a rerun after a full disk) finds the old file or the new one,
    never an empty one; a link keeps pointing at it, and it keeps its permissions."""
    text_saved(path, json_text(obj, indent=indent))


@contextmanager
def uninterrupted(*, deliver: bool = True):
    """Ctrl-C and SIGTERM held until the block ends, then delivered (``deliver``; else the caller reads the
    signals held from the list it is given): files that go together (a head's weights, its description and
    the run's record) are never left half the old run's and half the new one's by an interrupt between
    them. In the main thread only (where Python runs signal handlers); elsewhere nothing is held."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, lambda signum, frame: held.append(signum))
    try:
        yield held
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if held and deliver:  # as if it came now: the command's own handler says what was kept
            os.kill(os.getpid(), held[0])


def replaced_whole(path: str, write) -> None:
    """``write(tmp)`` writes the file beside ``path``, which then replaces ``path`` in one rename: a kill
    while writing leaves the old file whole (a library that writes in place, as safetensors does, left a
    cut one over it). A link is followed (the file it names is replaced, the link stays), and what is no
    regular file (/dev/null, /dev/stdout, a FIFO) is written in place: a rename replaced the link, or the
    device, with a file. The file replaced keeps its permission bits."""
    if _is_stream(path):
        try:
            write(path)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
        return
    if os.path.islink(path):
        path = os.path.realpath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        write(tmp)
        if os.path.isfile(path):
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except OSError as exc:  # named by the file meant, not the temporary one
        raise OSError(exc.errno, exc.strerror, path) from None
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def _is_stream(path: str) -> bool:
    """Whether ``path`` is written as a stream, in place: a device, a pipe, or a name under /dev or /proc on the
    way (/dev/stdout leads through /proc/self/fd/1 to whatever the shell sent it to: a file it appends to
    must be written, not replaced by another)."""
    hop = os.path.abspath(path)
    for _ in range(40):  # links of links, as the kernel follows them
        if hop.startswith(("/dev/", "/proc/")):
            return True
        if not os.path.islink(hop):
            break
        hop = os.path.join(os.path.dirname(hop), os.readlink(hop))
    return os.path.exists(path) and not os.path.isfile(path)


def text_saved(path: str, text: str) -> None:
    """``text`` at ``path``, whole (`replaced_whole`), flushed to disk before the rename: a full disk left a
    report cut mid-table over the good one."""
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # a device or a pipe, written in place, has no disk
                os.fsync(f.fileno())
    replaced_whole(path, write)


def figure_saved(fig, path: str, **options) -> None:
    """A matplotlib figure at ``path``, whole (`replaced_whole`; its format read from ``path``'s extension,
    not the temporary file's): a full disk left a cut PNG over the good one."""
    fmt = os.path.splitext(path)[1].lstrip(".") or "png"
    replaced_whole(path, lambda tmp: fig.savefig(tmp, format=fmt, **options))


LOCK_FILE = ".layerfuse.lock"  # in each folder a writer locks: a file, since NFS locks a directory itself not at all
# What flock says on a file system without locks: NFS without lockd, Lustre without -o flock, some FUSE mounts.
NO_LOCKS = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP)


class LocksUnsupported(OSError):
    """A lock file on a file system without file locks, said as what to do and naming the file (the CLI's
    one line): a bare "No locks available", or "Function not implemented", named no file."""

    def __init__(self, errno_: int, path: str):
        super().__init__(errno_, "the file system does not support file locks (NFS without lockd, Lustre without "
                                 "-o flock, some FUSE mounts), which keep two writers apart: put the cache root or "
                                 "--out on a local disk, or mount it with locks", path)


def flocked(fd: int, how: int, path: str) -> None:
    """``fcntl.flock(fd, how)``; on a file system without locks, `LocksUnsupported` naming ``path``."""
    try:
        fcntl.flock(fd, how)
    except OSError as exc:
        if exc.errno in NO_LOCKS:
            raise LocksUnsupported(exc.errno, path) from None
        raise


def check_lockable(path: str) -> None:
    """Refuses in one line (`LocksUnsupported`) a lock file on a file system without locks, before filelock takes it:
    filelock then falls back to a marker file, which an empty lock file left by an earlier writer holds for
    good (an extract waited for no one, forever), and its releases before 3.24 raise NotImplementedError."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        flocked(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, path)
    except BlockingIOError:  # held by another: locks work
        pass
    finally:
        os.close(fd)


@contextmanager
def folder_locked(folder: str):
    """``folder`` (made if missing) held by this process alone for the block: an exclusive lock on its
    `LOCK_FILE` (empty; left there for the next writer)."""
    os.makedirs(folder, exist_ok=True)
    lock = os.path.join(folder, LOCK_FILE)
    fd = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o666)  # the umask decides
    try:
        flocked(fd, fcntl.LOCK_EX, lock)  # released when the descriptor is closed
        yield
    finally:
        os.close(fd)


@contextmanager
def writing(path: str):
    """A library's error while writing ``path`` that carries an OS error number only in its text (the
    ``SafetensorError`` of a full disk) raised as that `OSError`, naming ``path``: one line at the CLI."""
    try:
        yield
    except OSError:
        raise
    except Exception as exc:
        found = re.search(r"os error (\d+)", str(exc))
        if found is None:
            raise
        number = int(found.group(1))
        raise OSError(number, os.strerror(number) or errno.errorcode.get(number, "error"), path) from exc
