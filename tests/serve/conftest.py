"""A real server for the service's tests: uvicorn on 127.0.0.1, on a free port, in a background
thread (`layerfuse.serve.threaded.BackgroundServer`), stopped when the test ends.

- ``serve(root, **fields)`` starts one over ``root`` with any `ServerState` fields (``token`` is
  `WRITE_TOKEN` unless given) and returns it: ``.url``, ``.state``, ``.app``.
- ``served`` is one over ``served_root`` (a root holding a copy of the tiny cache entry, free to
  change) with the fields of ``server_fields``; a test changes them with
  ``@pytest.mark.parametrize("server_fields", [{"read_token": "r"}])``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

WRITE_TOKEN = "write-token-of-the-tests"


@pytest.fixture
def serve():
    from layerfuse.serve.state import ServerState
    from layerfuse.serve.threaded import BackgroundServer

    started = []

    def start(root, **fields):
        fields.setdefault("token", WRITE_TOKEN)
        server = BackgroundServer(ServerState(root=Path(root), **fields)).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
    _close_zarr_http_sessions()


def _close_zarr_http_sessions() -> None:
    """zarr's HTTP filesystems (asynchronous, on zarr's event loop) keep aiohttp sessions nothing
    closes: close them, and forget the filesystems, so a run ends without 'Unclosed client session'."""
    from fsspec.implementations.http import HTTPFileSystem
    from zarr.core.sync import sync

    for fs in list(HTTPFileSystem._cache.values()):
        session = getattr(fs, "_session", None)
        if fs.asynchronous and session is not None and not session.closed:
            sync(session.close())
    HTTPFileSystem.clear_instance_cache()


@pytest.fixture
def served_root(tmp_path, tiny_cache) -> Path:
    root = tmp_path / "served"
    root.mkdir()
    shutil.copytree(tiny_cache, root / os.path.basename(tiny_cache))
    return root


@pytest.fixture
def server_fields() -> dict:
    return {}


@pytest.fixture
def served(serve, served_root, server_fields):
    return serve(served_root, **server_fields)
