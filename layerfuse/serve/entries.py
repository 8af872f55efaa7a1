"""Complete entries over HTTP, read-only: their files for zarr's fsspec store, and a JSON API.

- ``GET/HEAD /entries/<name>/<path>``: a file of a complete entry, with range requests (zarr reads
  a shard's index with a suffix range ``bytes=-N`` and its inner chunks with ``bytes=A-B``;
  Starlette's `FileResponse` answers both with 206) and Content-Length on HEAD. A ``Range`` that is
  not well formed, or of another unit, is ignored (200, the whole file); one whose ranges all lie past
  the end is a 416 (`ranges`). A missing file is a 404, which zarr's store reads as "no such chunk".
- ``GET /entries/<name>[/<dir>]`` and ``GET /entries/``: a directory as an HTML list of links, which
  is what fsspec's HTTP filesystem reads as ``ls``; zarr lists a group's members that way (the
  reader finds an entry's splits so), so ``--cache http://HOST:PORT/entries/<name>`` reads exactly
  as a local path does, checksums checked by the client.
- ``GET /api/entries``, ``GET /api/entries/<name>``: every entry (partial ones too, marked so) and
  one entry's metadata, as JSON, their times in the API's one format (`stamps`).

While a file is sent, the server holds the entry as a reader does (`cache.usage.hold`): `gc`
and `rm` skip it.

Nothing else is served: not a partial entry, not the root's own files (the token, the ``.read`` and
``.lock`` sidecars), no ``..``, no absolute path, no symlink resolving outside its entry. Escapes
are 403, missing or partial things 404. Reads are open unless the server has a read token.
"""

from __future__ import annotations

import html
import os
from urllib.parse import quote

import anyio
from starlette.background import BackgroundTask
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ..cache.layout import subgroups
from ..cache.manage import MASKING_FIELDS, OPTION_FIELDS, EntryStatus, entry_status, list_entries
from ..cache.store import open_group
from ..cache.usage import hold, in_use, last_read, mark_read
from ..errors import LayerfuseError
from ..tasks import DEFAULT_TASK
from .ranges import for_file
from .stamps import api_time, api_times


def routes() -> list[Route]:
    return [
        Route("/entries", index),
        Route("/entries/", index),
        Route("/entries/{name}", entry_path),
        Route("/entries/{name}/{path:path}", entry_path),
        Route("/api/entries", api_entries),
        Route("/api/entries/{name}", api_entry),
    ]


class Refused(Exception):
    """A request that is answered with an error: ``status`` and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def error(status: int, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _check_read(request: Request) -> None:
    if not request.app.state.server.may_read(request.headers.get("authorization")):
        raise Refused(401, "reading this server needs its read token (Authorization: Bearer ...)")


# ------------------------------------------------------------------------------ what may be served


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def entry_dir(root: str, name: str) -> str:
    """The real directory of entry ``name`` directly under ``root`` (whatever its state)."""
    if not name or name.startswith(".") or any(c in name for c in "/\\\0"):
        raise Refused(403, f"{name!r} is not an entry name")
    path = os.path.join(root, name)
    real = os.path.realpath(path)
    if not _inside(real, os.path.realpath(root)):
        raise Refused(403, f"entry {name!r} lies outside the served root")
    if not os.path.isfile(os.path.join(real, "zarr.json")):
        raise Refused(404, f"no entry named {name!r}")
    return real


# An entry's verdict is kept while its metadata files are unchanged: a range request then costs a
# few stat calls, not a zarr open. A split turning complete rewrites its zarr.json (size, mtime).
# A verdict: whether the whole entry is complete, and which of its splits are.
_verdicts: dict[str, tuple[tuple, tuple[bool, frozenset]]] = {}


def _signature(real: str) -> tuple:
    parts = []
    for path in [real] + sorted(e.path for e in os.scandir(real) if e.is_dir()):
        try:
            st = os.stat(os.path.join(path, "zarr.json"))
        except OSError:
            continue
        parts.append((path, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(parts)


def _known(real: str) -> tuple[bool, frozenset] | None:
    """The cached verdict on ``real``, or None when its metadata changed since (or never seen)."""
    try:
        signature = _signature(real)
    except OSError:
        return False, frozenset()
    hit = _verdicts.get(real)
    return hit[1] if hit is not None and hit[0] == signature else None


def _judge(real: str) -> tuple[bool, frozenset]:
    signature = _signature(real)
    try:
        status = entry_status(real, size=False)
        verdict = status.complete, frozenset(name for name, done in status.splits.items() if done)
    except Exception:  # not an entry, or damaged: not served either way
        verdict = False, frozenset()
    _verdicts[real] = (signature, verdict)
    return verdict


async def complete_dir(root: str, name: str, path: str = "") -> str:
    """The real directory of entry ``name`` when it is complete, or, while another split is written into
    it, when ``path`` is a file of one of its complete splits: a reader that opened the entry before
    keeps reading its split (as a local reader does); opening it waits until the entry is complete."""
    real = entry_dir(root, name)
    verdict = _known(real)
    if verdict is None:  # zarr's metadata read, off the event loop
        verdict = await anyio.to_thread.run_sync(_judge, real)
    complete, splits = verdict
    split, _, inside = path.partition("/")
    if not complete and not (inside and split in splits):
        raise Refused(404, f"entry {name!r} is not complete (its extraction has not finished)")
    return real


def inner_path(real: str, path: str) -> str:
    """``path`` (as sent, percent-decoded) inside the entry directory ``real``, symlinks resolved."""
    parts = path.split("/")
    if parts and parts[-1] == "":  # a directory asked for with a trailing slash
        parts.pop()
    if any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        raise Refused(403, f"{path!r} is not a path inside the entry")
    target = os.path.realpath(os.path.join(real, *parts))
    if not _inside(target, real):
        raise Refused(403, f"{path!r} resolves outside the entry")
    return target


# ------------------------------------------------------------------------------ files and listings


class _File(FileResponse):
    chunk_size = 1 << 20  # a shard range in a few reads, not one thread hop per 64 KiB

    async def __call__(self, scope, receive, send):
        """Sent with its ``Range`` header as `ranges.for_file` reads it: one that is not well formed ignored."""
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"range"]
        asked = Headers(scope=scope).get("range")
        wanted = None if asked is None else for_file(asked, self.stat_result.st_size)
        if wanted is not None:
            headers.append((b"range", wanted.encode("latin-1")))
        await super().__call__({**scope, "headers": headers}, receive, send)


async def entry_path(request: Request) -> Response:
    state = request.app.state.server
    name, path = request.path_params["name"], request.path_params.get("path", "")
    held = None
    try:
        _check_read(request)
        real = await complete_dir(str(state.root), name, path)
        held = _hold(real, name)
        target = inner_path(real, path) if path else real
        st = os.stat(target)
    except Refused as exc:
        _release(held)
        return error(exc.status, str(exc))
    except (OSError, ValueError):  # a missing file (zarr reads a 404 as an absent chunk)
        _release(held)
        return error(404, f"no file {path!r} in entry {name!r}")
    if os.path.isfile(target) and not target.endswith("zarr.json"):  # its data, not a listing's look at it
        mark_read(os.path.join(str(state.root), name))  # at most once a minute per entry (`gc` orders by it)
    if os.path.isdir(target):  # what would be served: no symlink out of the entry
        names = [n + "/" * os.path.isdir(os.path.join(target, n)) for n in sorted(os.listdir(target))
                 if _inside(os.path.realpath(os.path.join(target, n)), real)]
        _release(held)
        return _listing(request, names)
    # chunks: application/octet-stream, metadata: application/json; the entry stays held until the
    # last byte is sent (or, if the client goes first, until the response is dropped)
    return _File(target, stat_result=st, background=BackgroundTask(_release, held))


def _hold(real: str, name: str):
    """A reader's shared lock on the entry while one of its files is served: `gc` and `rm` skip it."""
    try:
        return hold(real, wait=False)
    except LayerfuseError:  # being removed right now (`usage.EntryInUse`), or gone
        raise Refused(404, f"entry {name!r} is being removed") from None


def _release(held) -> None:
    if held is not None:
        held.release()


async def index(request: Request) -> Response:
    """The complete entries, as links: fsspec's ``ls`` of ``http://HOST:PORT/entries``."""
    state = request.app.state.server
    try:
        _check_read(request)
    except Refused as exc:
        return error(exc.status, str(exc))
    root = str(state.root)
    names = []
    for name in sorted(os.listdir(root)):
        try:
            await complete_dir(root, name)
        except (Refused, OSError):
            continue
        names.append(name + "/")
    return _listing(request, names)


def _listing(request: Request, names: list[str]) -> HTMLResponse:
    """Links by absolute path, so they resolve the same with or without a trailing slash; a folder's ends in
    one (``names`` say which), as fsspec's HTTP listing reads folders (its find and walk took them for files).
    The path is sent encoded: decoded, an entry renamed by hand to a name with a space or an accent listed no
    split that its own links matched, and every client took it for incomplete."""
    raw = request.scope.get("raw_path")  # the path as sent, its escapes kept; `path` is decoded
    base = (raw.decode("latin-1") if raw else quote(request.scope["path"], safe="/")).split("?")[0].rstrip("/")
    links = [(html.escape(f"{base}/{quote(n.rstrip('/'), safe='')}{'/' * n.endswith('/')}"), html.escape(n))
             for n in names]
    items = "".join(f'<li><a href="{href}">{text}</a></li>\n' for href, text in links)
    title = html.escape(request.scope["path"].rstrip("/") + "/")  # for a reader: decoded
    return HTMLResponse(f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>"
                        f"<body><h1>{title}</h1>\n<ul>\n{items}</ul></body></html>\n")


# ------------------------------------------------------------------------------ JSON API


def api_entries(request: Request) -> Response:
    """Every entry under the root, newest first (sync: Starlette runs it on a worker thread)."""
    state = request.app.state.server
    try:
        _check_read(request)
    except Refused as exc:
        return error(exc.status, str(exc))
    out = []
    for entry in served_entries(str(state.root)):
        try:
            out.append(summary(entry))
        except Exception:  # removed (gc, rm) since it was listed
            continue
    return JSONResponse(out)


def served_entries(root: str) -> list:
    """The `EntryStatus` of every entry the server may serve under ``root``, complete or not: a symlink to
    an entry elsewhere is not ours (neither listed nor counted)."""
    out = []
    for entry in list_entries(root):
        try:
            entry_dir(root, os.path.basename(entry.path))
        except Refused:
            continue
        out.append(entry)
    return out


def api_entry(request: Request) -> Response:
    state = request.app.state.server
    name = request.path_params["name"]
    try:
        _check_read(request)
        real = entry_dir(str(state.root), name)
        status = entry_status(os.path.join(str(state.root), name))
        group = open_group(real, mode="r")
        described = summary(status)
        # each split as the listing gives it (rows, sentences, complete: a split planned and not started too),
        # and its stored attributes (times in the API's format) and shape besides: the detail replaced the
        # listing's fields with these
        splits = {n: {**described["splits"].get(n, {}), **api_times(dict(g.attrs)),
                      "hidden_shape": list(g["hidden"].shape)}
                  for n, g in subgroups(group) if "kind" not in g.attrs and "hidden" in g}
    except Refused as exc:
        return error(exc.status, str(exc))
    except Exception:  # not ours, damaged, or removed meanwhile
        return error(404, f"{name!r} is not a readable layerfuse entry")
    meta = api_times(dict(group.attrs))
    return JSONResponse({**described, "meta": meta, "splits": {**described["splits"], **splits}})


def summary(entry: EntryStatus) -> dict:
    """What tells one entry from another and how far it got, for a listing."""
    name = os.path.basename(entry.path.rstrip("/"))
    group = open_group(entry.path, mode="r")
    attrs = dict(group.attrs)
    splits = {}
    for split, done in entry.splits.items():
        split_attrs = group[split].attrs if split in group else {}  # planned, not started
        splits[split] = {"rows": split_attrs.get("n_rows"), "sentences": split_attrs.get("n_sentences"),
                         "complete": done}
    read = last_read(entry.path)
    return {
        "name": name,
        "model": entry.model,
        "dataset": entry.dataset,
        "task": entry.fields.get("task", DEFAULT_TASK),
        "options": {f: entry.fields.get(f) for f in OPTION_FIELDS + MASKING_FIELDS
                    if f in OPTION_FIELDS or f in entry.fields},  # an MLM entry's masking tells it apart too
        "splits": splits,
        "bytes": entry.bytes_on_disk,
        "complete": entry.complete,
        "missing_splits": entry.missing,  # asked for and not finished: a rerun of `extract` writes them
        "created": api_time(attrs.get("created")),
        "finished": api_time(entry.finished),
        "last_read": api_time(read),
        "in_use": in_use(entry.path),
        "url": f"/entries/{quote(name)}" if entry.complete else None,
    }
