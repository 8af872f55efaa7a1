"""Eviction: remove the least recently used complete entries until a cache root fits a size.

An entry's last use is the later of its last recorded read (`usage.last_read`) and its finish
time: a stale read left beside a re-extracted entry of the same name must not make the new entry
look old. An entry a reader has open (it holds the entry's shared lock, `usage.hold`, however long
ago it last read), one being written, and partial entries are never removed, even if the root then
stays over the size: the first two are skipped and reported through ``on_skip``.
"""

from __future__ import annotations

import os
import re
from datetime import datetime

from ..errors import LayerfuseError
from .layout import is_remote
from .manage import EntryStatus, bytes_on_disk, list_entries, remove
from .usage import EntryInUse, busy, last_read

FINISHED_FORMAT = "%Y-%m-%dT%H:%M:%S%z"  # how the writer stamps a split's "finished"
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}  # binary, as `ls` prints sizes
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str | int, *, name: str = "--max-size") -> int:
    """Bytes from ``500M``, ``20G``, ``1.5T`` (K/M/G/T in powers of 1024; ``GB``/``GiB`` alike) or
    a plain number of bytes."""
    match = _SIZE.match(str(text))
    if not match:
        raise LayerfuseError(f"{name} {text!r} is not a size: a number of bytes, or one with K, M, G or T "
                              f"(500M, 20G)")
    return int(float(match[1]) * _UNITS[match[2].upper()])


def last_used(entry: EntryStatus) -> float:
    """Seconds since the epoch of the entry's last read or finish, whichever is later (0: neither)."""
    finished = datetime.strptime(entry.finished, FINISHED_FORMAT).timestamp() if entry.finished else 0.0
    return max(last_read(entry.path) or 0.0, finished)


def collect(root: str, *, max_size: int, dry_run: bool = False, on_skip=None) -> list[EntryStatus]:
    """Remove the least recently used complete entries not in use until ``root`` holds at most
    ``max_size`` bytes; returns the entries removed (``dry_run``: those that would be), oldest first.
    ``on_skip(entry, reason)`` hears of each entry it would have removed but a reader or writer has."""
    if is_remote(root):  # reads of an object store are not recorded: the order would be a guess
        raise LayerfuseError(f"gc works on local cache roots only, not {root}")
    if not os.path.isdir(root):
        return []
    total = bytes_on_disk(root)  # the whole root: partial entries and sidecars count toward the size
    removed = []
    for entry in sorted((e for e in list_entries(root) if e.complete), key=last_used):
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


def _removal(path: str, *, dry_run: bool) -> str | None:
    """Remove ``path`` (``dry_run``: only look); why not, when a reader or writer has it."""
    if dry_run:
        return busy(path)
    try:
        remove(path)  # takes the entry's lock exclusively, or raises
    except EntryInUse as exc:
        return exc.reason
    return None
