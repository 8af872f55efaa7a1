"""What a job may ask of the server, checked before it is queued.

A job names its dataset by a name the readers know (``wnut16``, ``conll03``, ``wikiann:LANG``, a
hub id, ...) or by a path, and its model by a hub id, a built-in name or a path. The write token lets
a client run extractions, not read the server's files: a path, dataset or model, must resolve
(symlinks followed) under a directory the server was started with (``serve --data-dir``, none by
default), never inside the served root, never a token file.

Errors go back to the client, so they never quote a file: a reader's message that names a line
(``FILE:LINE: ... 'the line'``) is answered with its location only, and the whole message goes to
the server's log for its operator.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from ..extract.entry import MAX_UNIT_ROWS
from ..extract.formats.registry import looks_like_path

UNIT_ROWS = (256, MAX_UNIT_ROWS)  # rows per shard a job may ask for: the range `default_unit_rows` picks from
log = logging.getLogger("layerfuse.serve")

# "FILE:LINE: reason: 'the line'", "FILE:LINE (--columns ner=1): ..." as the dataset readers word
# errors on a line: the location, then an optional parenthesised option, then the part that quotes
_AT_LINE = re.compile(r"^(.+?:\d+)(?: \(.*?\))?: ")


class Refusal(Exception):
    """A job the server will not take: the one-line reason, answered as a 422."""


def admit(options: dict, state) -> None:
    """Refuse (`Refusal`) a job's options that a server with ``state`` (a `ServerState`) does not take."""
    where = {"data_dirs": state.data_dirs, "root": state.root, "private": state.private}
    check_dataset(options.get("dataset"), **where)
    check_model(options.get("model"), **where)
    check_unit_rows(options.get("unit_rows"))


def check_dataset(spec: str | None, *, data_dirs, root, private=()) -> None:
    """Refuse ``spec`` when it names a path outside every data directory (or inside ``root``, or a
    file of ``private``); a name that is no path on this machine passes (the readers resolve it)."""
    _check_local("dataset", spec, data_dirs=data_dirs, root=root, private=private)


def check_model(spec: str | None, *, data_dirs, root, private=()) -> None:
    """Refuse ``spec`` as `check_dataset` refuses a dataset path: a model folder is read too (its
    config's errors quote its values), so a path elsewhere would let a client probe the server's
    files. A hub id or a built-in name passes (None is the default model). A path under a data directory
    that does not exist is named as `extract` names a dataset's (reading its config said only
    ``cannot read the model's config: OSError``)."""
    _check_local("model", spec, data_dirs=data_dirs, root=root, private=private)
    if spec is not None and is_path(spec) and not Path(spec).expanduser().exists():
        raise Refusal(f"model path {spec!r} does not exist")


def _check_local(what: str, spec: str | None, *, data_dirs, root, private) -> None:
    """Refuse ``spec``, the job's ``what``, when it is a path outside every data directory, inside
    ``root`` or a file of ``private``."""
    if spec is not None and "\0" in spec:
        raise Refusal(f"{what} {spec!r} holds a NUL byte; it is neither a name nor a path")
    if spec is None or not is_path(spec):
        return
    real = Path(os.path.realpath(Path(spec).expanduser()))
    if _inside(real, Path(root).resolve()) or any(real == Path(p).resolve() for p in private):
        raise Refusal(f"{what} {spec!r} lies inside the server's own files; it is not a {what}")
    if not any(_inside(real, Path(d).resolve()) for d in data_dirs):
        where = ", ".join(str(d) for d in data_dirs) or "none: the server was started without --data-dir"
        raise Refusal(f"{what} {spec!r} is not under a data directory of this server ({where})")


def check_unit_rows(value: int | None) -> None:
    lo, hi = UNIT_ROWS
    if value is not None and not lo <= value <= hi:
        raise Refusal(f"unit_rows {value} is outside {lo}..{hi} (rows per shard)")


def without_contents(message: str) -> str:
    """``message`` as a client may see it: a line-level reader error keeps its location, not the line."""
    first = (message.strip().splitlines() or ["error"])[0]
    at_line = _AT_LINE.match(first)
    if at_line is None:
        return first
    log.warning("job refused: %s", first)  # the operator sees the line; the client does not
    return f"{at_line[1]}: not a dataset this server can read (the server's log has the reason)"


def is_path(spec: str) -> bool:
    """Whether the readers (or `from_pretrained`) would take ``spec`` as a path: one written as a
    path (`looks_like_path`, as the readers decide, or starting with a dot, or with a backslash), or
    anything that exists relative to the server's working directory (both look there before the hub)."""
    if spec.startswith(("/", "~", ".")) or "\\" in spec:
        return True
    try:
        return looks_like_path(spec) or Path(spec).exists()
    except (OSError, ValueError):
        return True


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents
