"""The cache root a command uses, checked before any work: a root that is a file, that cannot be read, or
(for a command that writes) cannot be written is one line naming it and what is wrong. Without the check,
`ls` of a file said "no entries" and exited 0, and `extract` failed deep inside with a bare "File exists"."""

from __future__ import annotations

import os

from ..cache.layout import checked_root, home_path
from ..errors import LayerfuseError

__all__ = ["checked_out", "checked_root"]  # checked_root lives with the cache's layout: `extract` checks it too


def checked_out(out: str, *, option: str = "--out") -> str:
    """The folder a command writes its results to, checked before any work: one that is a file (or below
    one), or that cannot be written (or made), is refused in one line naming it. Without the check,
    `train-head` trained, then died writing the head (a 32-line SafetensorError, a bare "File exists").
    Returns it with a quoted ~ (``--out=~/runs``) read as the home folder, not a folder named ~."""
    out = home_path(out)
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
