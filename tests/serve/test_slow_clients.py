"""Slow and hostile clients never take the server down: idle half-sent requests are dropped after the read
deadline, or sooner to make room at the connection cap, healthy clients are served meanwhile, and the log
holds one line per class of refused client, not one per connection. Tokens never reach the log, and the
``Bearer`` scheme is matched in any case."""

from __future__ import annotations

import logging
import socket
import time
import urllib.request

import pytest

from layerfuse.serve import guard
from layerfuse.serve.state import ServerState

HALF_SENT = 300  # idle half-sent requests opened, all to 127.0.0.1
CAP = 100  # the connection cap the server runs with here
HEALTHY = 30  # requests of a well-behaved client made among them


@pytest.fixture
def small_server(serve, served_root, monkeypatch):
    monkeypatch.setattr(guard, "CONNECTION_CAP", CAP)
    monkeypatch.setattr(guard, "READ_SECONDS", 1.5)
    return serve(served_root)


def test_idle_half_sent_requests_neither_block_healthy_clients_nor_flood_the_log(small_server, caplog):
    caplog.set_level(logging.INFO)
    idle, served = [], 0
    try:
        for i in range(HALF_SENT):
            s = socket.create_connection(("127.0.0.1", small_server.port), timeout=5)
            s.sendall(b"GET /api/entries HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # never finished
            idle.append(s)
            if i % (HALF_SENT // HEALTHY) == 0:
                with urllib.request.urlopen(f"{small_server.url}/api/entries", timeout=5) as r:
                    served += r.status == 200
        time.sleep(guard.READ_SECONDS + 1.0)
        closed = sum(_closed_by_server(s) for s in idle)
    finally:
        for s in idle:
            s.close()
    lines = [r for r in caplog.records if r.name in ("layerfuse.serve", "uvicorn.error", "asyncio")
             and r.levelno >= logging.WARNING]
    print(f"\nhalf-sent {HALF_SENT}, cap {CAP}: healthy served {served}/{HEALTHY}, closed by the server {closed}, "
          f"log lines {len(lines)}")
    assert served == HEALTHY
    assert closed == HALF_SENT  # dropped at the cap or at the deadline: none held
    assert 1 <= len(lines) <= 2 and all(r.exc_info is None for r in lines), [r.getMessage() for r in lines]


def _closed_by_server(s: socket.socket) -> bool:
    """Whether the server has closed ``s`` by now (looked at without waiting)."""
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except BlockingIOError:  # open, nothing sent: still held by the server
        return False


def test_tokens_never_reach_the_access_log():
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 0, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", "/api/entries?token=s3cret&x=1", "1.1", 200), None)
    guard.server_options(host="127.0.0.1", port=0)
    assert all(f.filter(record) for f in logging.getLogger("uvicorn.access").filters)
    assert "s3cret" not in record.getMessage() and "/api/entries" in record.getMessage()


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_bearer_scheme_in_any_case(scheme, tmp_path):
    state = ServerState(root=tmp_path, token="t0k")
    assert state.may_write(f"{scheme} t0k") and not state.may_write(f"{scheme} other")
    assert not state.may_write("Basic t0k")


def test_tokens_never_reach_the_server_log(tmp_path, caplog):
    """A dataset file that is the token file (a link to it inside a data dir): the reader's error quotes the
    line, and the operator's log line quoted the token."""
    from layerfuse.serve.admit import without_contents
    from layerfuse.serve.app import create_app

    create_app(ServerState(root=tmp_path, token="w-s3cret", read_token="r-s3cret"))
    with caplog.at_level(logging.WARNING, logger="layerfuse.serve"):
        client_line = without_contents("data/leak/train.txt:1: a token line without a tag: 'w-s3cret r-s3cret'")
    assert "s3cret" not in client_line and "s3cret" not in caplog.text
    assert "a token line without a tag: '<token> <token>'" in caplog.text  # the reason stays, the token goes


def test_a_token_sent_in_a_path_is_not_written_to_the_access_log(tmp_path, caplog):
    """`GET /api/jobs/<token>` (a token pasted into a URL) went to uvicorn's access log as it was sent."""
    from layerfuse.serve.app import create_app

    create_app(ServerState(root=tmp_path, token="w-s3cret", read_token="r-s3cret"))
    access = logging.getLogger("uvicorn.access")
    with caplog.at_level(logging.INFO, logger="uvicorn.access"):
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", "/api/jobs/r-s3cret", "1.1", 401)
    assert "s3cret" not in caplog.text and '"GET /api/jobs/<token> HTTP/1.1" 401' in caplog.text
