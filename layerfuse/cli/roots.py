"""The cache root a command uses, checked before any work: a root that is a file, that cannot be read, or
(for a command that writes) cannot be written is one line naming it and what is wrong. Without the check,
`ls` of a file said "no entries" and exited 0, and `extract` failed deep inside with a bare "File exists"."""

from __future__ import annotations

import os

from ..cache.layout import cache_root, is_remote, local_path
from ..errors import LayerfuseError

# What train-head and sweep write to the root (the measured precision, an entry they extract), and how a
# read-only root is read all the same.
READ_ONLY_ROOT = ("; or read an entry there without writing to the root: --cache PATH/<entry> with an explicit "
                  "--precision")


def checked_root(cache_dir: str | None, *, write: bool, or_else: str = "") -> str:
    """``cache_root(cache_dir)``, refused in one line when it (or, not made yet, the folder it would be
    made in) is a file, unreadable, or read-only while ``write``. A remote root (fsspec URL) is left to
    its store, which names its own errors."""
    root = cache_root(cache_dir)
    if is_remote(root):
        return root
    path = os.path.abspath(local_path(root))
    name = f"--cache-dir {cache_dir}" if cache_dir else f"the cache root {path}"
    existing = path
    while not os.path.lexists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)  # the root is made on first write: its nearest existing folder
    if not os.path.isdir(existing):
        where = "" if existing == path else f" ({existing} is one)"
        raise LayerfuseError(f"{name} is not a directory{where}: name a folder, or a path where one can be made")
    if existing == path and not os.access(path, os.R_OK | os.X_OK):
        raise LayerfuseError(f"{name} is not readable (permission denied)")
    if write and not os.access(existing, os.W_OK | os.X_OK):
        what = "is read-only" if existing == path else f"cannot be made: {existing} is read-only"
        raise LayerfuseError(f"{name} {what}; this command writes there (name a writable --cache-dir{or_else})")
    return root


def checked_out(out: str, *, option: str = "--out") -> str:
    """The folder a command writes its results to, checked before any work: one that is a file (or below
    one), or that cannot be written (or made), is refused in one line naming it. Without the check,
    `train-head` trained, then died writing the head (a 32-line SafetensorError, a bare "File exists").
    Returns it with a quoted ~ (``--out=~/runs``) read as the home folder, not a folder named ~."""
    out = os.path.expanduser(out)
    path = os.path.abspath(out)
    existing = path
    while not os.path.lexists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)  # made on first write: its nearest existing folder
    if not os.path.isdir(existing):
        where = "" if existing == path else f" ({existing} is one)"
        raise LayerfuseError(f"{option} {out} is a file, not a folder{where}: name a folder, or a path where one "
                             "can be made")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "is read-only" if existing == path else f"cannot be made: {existing} is read-only"
        raise LayerfuseError(f"{option} {out} {what}; name a writable {option}")
    return out
