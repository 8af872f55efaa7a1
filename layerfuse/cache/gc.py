"""Eviction: remove the least recently used complete entries until a cache root fits a size.

An entry's last use is the later of its last recorded read (`usage.last_read`) and its finish
time: a stale read left beside a re-extracted entry of the same name must not make the new entry
look old. A time that lies in the future (`manage.in_future`: a clock ahead, a copy that kept times)
is no evidence of use: it is left out, and gc's line says so. An entry a reader has open (it holds
the entry's shared lock, `usage.hold`, however long ago it last read), one being written, and partial
entries are never removed, even if the root then stays over the size: the first two are skipped and
reported through ``on_skip``.

Garbage goes first, whatever the size (`leftovers`): what a removal or an extract killed half-way
left (a folder renamed by `manage.remove`, or an entry's folder without its ``zarr.json``, its lock
beside it, that no extract is writing). Entries whose metadata cannot be read (`damaged`) cannot be
used, and go before any readable entry once the root is over its size.
"""

from __future__ import annotations

import os
import re
import shutil
import time

from ..errors import LayerfuseError, NewerFormatError, OptionError
from .layout import ENTRY_NAME, is_remote, local_path
from .manage import (
    REMOVING,
    EntryStatus,
    NotAnEntryError,
    NotRemovable,
    bytes_on_disk,
    entry_status,
    finished_seconds,
    in_future,
    list_entries,
    removal_blocker,
    remove,
    writer_lock,
)
from .usage import EntryInUse, busy, last_read, perhaps_written

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}  # binary, as `ls` prints sizes
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str | int, *, name: str = "--max-size") -> int:
    """Bytes from ``500M``, ``20G``, ``1.5T`` (K/M/G/T in powers of 1024; ``GB``/``GiB`` alike) or
    a plain number of bytes."""
    match = _SIZE.match(str(text))
    if match and not match[2] and "." in match[1]:  # 0.5 read as 0 bytes: a gc that evicted everything
        raise OptionError(f"{name} {text!r}: a number of bytes is whole; give a unit for a fraction (0.5G)")
    if not match:
        raise OptionError(f"{name} {text!r} is not a size: a number of bytes, or one with K, M, G or T "
                          f"(500M, 20G)")
    return int(float(match[1]) * _UNITS[match[2].upper()])


def last_used(entry: EntryStatus) -> float:
    """Seconds since the epoch of the entry's last read or finish, whichever is later (0: neither known);
    a time in the future is not known (`in_future`)."""
    return max((t for t in _recorded(entry).values() if not in_future(t)), default=0.0)


def said_last_used(entry: EntryStatus) -> str:
    """``last used 2024-05-01 12:00`` for gc's line on ``entry``; a recorded time left out, as in the
    future, is named."""
    used = last_used(entry)
    said = f"last used {_minute(used)}" if used else "last used unknown"
    future = {what: t for what, t in _recorded(entry).items() if in_future(t)}
    if future:
        times = " and ".join(f"{what} ({_minute(t)})" for what, t in future.items())
        said += f"{':' if not used else ';'} its recorded {times} lie{'s' * (len(future) == 1)} in the future"
    return said


def _recorded(entry: EntryStatus) -> dict[str, float]:
    return {"read": last_read(entry.path) or 0.0, "finish": finished_seconds(entry.finished)}


def _minute(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def collect(root: str, *, max_size: int, dry_run: bool = False, on_skip=None, on_damaged=None,
            on_leftover=None) -> list[EntryStatus]:
    """Remove what killed removals and extracts left (`leftovers`), then the least recently used complete
    entries not in use, until ``root`` holds at most ``max_size`` bytes; returns the entries removed
    (``dry_run``: those that would be), oldest first. An entry that is a link stays (it and what it points
    to are the user's). ``on_leftover(path, bytes)`` hears of each leftover removed; ``on_skip(entry,
    reason)`` of each entry it would have removed but a reader or writer has, or this user may not remove;
    ``on_damaged(path, bytes)`` of each unreadable entry removed first (`damaged`)."""
    if is_remote(root):  # reads of an object store are not recorded: the order would be a guess
        raise LayerfuseError(f"gc works on local cache roots only, not {root}")
    root = local_path(root)  # a file:// root is a local one
    if not os.path.isdir(root):
        return []
    garbage = leftovers(root, dry_run=dry_run)
    if on_leftover is not None:
        for path, size in garbage:
            on_leftover(path, size)
    # the whole root: partial entries and sidecars count toward the size; leftovers a dry run keeps do not
    total = bytes_on_disk(root) - (sum(size for _, size in garbage) if dry_run else 0)
    for path in damaged(root):
        if total <= max_size:
            break
        size = bytes_on_disk(path)
        if _removal(path, dry_run=dry_run, readable=False) is None:
            total -= size
            if on_damaged is not None:
                on_damaged(path, size)
    removed = []
    ours = (e for e in list_entries(root) if e.complete and not os.path.islink(e.path))
    for entry in sorted(ours, key=last_used):
        if total <= max_size:
            break
        reason = _removal(entry.path, dry_run=dry_run)
        if reason is not None:
            if on_skip is not None:
                on_skip(entry, reason)
            continue
        total -= entry.bytes_on_disk or 0
        removed.append(entry)
    return removed


def leftovers(root: str, *, dry_run: bool = False) -> list[tuple[str, int]]:
    """Remove (``dry_run``: only find) what killed removals left under a local ``root``: folders
    `manage.remove` renamed, and entry folders without ``zarr.json`` that no extract is writing.
    Returns ``(path, bytes)`` of each."""
    root = local_path(root)  # a file:// root is a local one
    if is_remote(root) or not os.path.isdir(root):
        return []
    found = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.islink(path) or not os.path.isdir(path):  # a link is the user's: neither it nor its target is ours
            continue
        renamed = name.startswith(".") and REMOVING in name
        # an extract takes the entry's lock, a file beside it, before it makes the folder: without that
        # lock a folder of an entry's name was not made here, and is not ours to remove
        orphan = (ENTRY_NAME.match(name) and os.path.exists(path + ".lock")
                  and not os.path.exists(os.path.join(path, "zarr.json")) and not perhaps_written(path))
        if not (renamed or orphan):
            continue
        size = bytes_on_disk(path)
        if not dry_run and not (_remove_renamed(path) if renamed else _remove_orphan(path)):
            continue  # not removed (permissions, or an extract took it meanwhile): not reported as removed
        found.append((path, size))
    return found


def _remove_renamed(path: str) -> bool:
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.exists(path)


def _remove_orphan(path: str) -> bool:
    """Remove an unfinished entry's folder while holding its lock, as an extract would: an extract starting
    between the check and the removal lost its folder. The lock file stays: removed, a second writer could
    lock a new file of that name while the first held the old one."""
    try:
        with writer_lock(path):
            if os.path.exists(os.path.join(path, "zarr.json")):  # an extract finished it since
                return False
            shutil.rmtree(path, ignore_errors=True)
            if os.path.exists(path + ".read"):
                os.remove(path + ".read")
            return not os.path.exists(path)
    except EntryInUse:  # an extract took it since
        return False


def damaged(root: str) -> list[str]:
    """The entries under a local ``root`` whose metadata cannot be read (oldest first); a link is the user's."""
    root = local_path(root)  # a file:// root is a local one
    if is_remote(root) or not os.path.isdir(root):
        return []
    paths = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if ENTRY_NAME.match(name) and os.path.isfile(os.path.join(path, "zarr.json")) and not os.path.islink(path):
            try:
                entry_status(path, size=False)
            except (NotAnEntryError, NewerFormatError, PermissionError):  # someone else's group, a newer release's
                continue  # entry, or one this user may not read: not damaged
            except Exception:  # noqa: BLE001 - whatever makes it unreadable: it cannot be used
                paths.append(path)
    return sorted(paths, key=os.path.getmtime)


def _removal(path: str, *, dry_run: bool, readable: bool = True) -> str | None:
    """Remove ``path`` (``dry_run``: only look); why not, when a reader or writer has it or this user may not.
    ``readable``: False for an entry whose metadata cannot be read (`damaged`)."""
    if dry_run:
        return removal_blocker(path) or busy(path)
    try:
        remove(path, readable=readable)  # takes the entry's lock exclusively, or raises
    except (EntryInUse, NotRemovable) as exc:
        return exc.reason
    return None
