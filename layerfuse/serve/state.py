"""What every part of the server shares: the root it serves, its tokens, the run folders it shows,
and the extraction queue. Built once by `app.create_app`; handlers reach it as
``request.app.state.server``."""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"  # only this machine, unless the operator says otherwise
DEFAULT_PORT = 8000
# The Host values a server bound to loopback answers: a web page elsewhere that rebinds its own name to
# 127.0.0.1 sends its name, and gets a 400 instead of the entries (reads are open by default).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
MAX_BODY_BYTES = 64 * 1024  # a job request is a few hundred bytes of JSON


@dataclass
class ServerState:
    root: Path  # the cache root served (resolved, absolute)
    token: str  # bearer token for every write (jobs, deletes)
    read_token: str | None = None  # when set, reads need it too (or the write token)
    runs: list[Path] = field(default_factory=list)  # run folders (sweeps, train-head outputs) shown on the page
    trust_remote_code: bool = False
    device: str | None = None  # the device extraction jobs run on (None: cuda when present)
    max_size: int | None = None  # after each job, evict least recently read entries down to this (bytes)
    data_dirs: list[Path] = field(default_factory=list)  # a job's dataset path must lie under one (--data-dir)
    private: list[Path] = field(default_factory=list)  # files no job may read whatever the data dirs (the tokens)
    hosts: tuple[str, ...] | None = None  # the Host header values answered (None: any)
    queue: object = None  # the `jobs.JobQueue`, set by create_app

    def may_write(self, header: str | None) -> bool:
        return _bearer_matches(header, self.token)

    def may_read(self, header: str | None) -> bool:
        return self.read_token is None or _bearer_matches(header, self.read_token) or self.may_write(header)


def _bearer_matches(header: str | None, token: str) -> bool:
    """Constant-time comparison of an ``Authorization: Bearer ...`` header with ``token``; the scheme's
    name in any case (RFC 9110 makes it case-insensitive)."""
    scheme, _, credentials = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(credentials.strip().encode(), token.encode())
