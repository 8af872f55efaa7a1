"""`layerfuse serve`: share one cache root over HTTP (see `layerfuse.serve`).

Tokens: every write (a job, a removal) needs the write token. ``--token-file F`` names a file
holding it; without it the token lives in ``ROOT/.serve-token``, created on first start with 32
random bytes (`secrets`) and mode 0600, and kept across restarts so clients keep working. The
command prints where the token is, never the token itself: logs and terminals get copied around.
``--read-token-file`` makes reads need a token too (the write token also reads); without it,
reads are open to whoever can reach the address, which by default is this machine only. A client
sends a read token through fsspec's configuration, e.g. in its environment:
``FSSPEC_HTTP='{"headers": {"Authorization": "Bearer TOKEN"}}'``.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path

import click

from ..cache.layout import is_remote, local_path
from ..errors import LayerfuseError, OptionError
from ..serve.state import DEFAULT_HOST, DEFAULT_PORT, LOOPBACK_HOSTS, ServerState
from .errors import NOTHING_TO_RESUME, friendly_errors
from .options import UserPath, cache_dir_option, device_option, say
from .roots import checked_root

SERVE_EXTRA = ("starlette", "uvicorn", "aiohttp")  # pyproject's `serve` extra
TOKEN_FILE = ".serve-token"  # under the root: hidden, and never served (not an entry)
# What a server writes under its root, whatever it is asked: said when the root is read-only.
SERVE_WRITES = ("serve keeps its job queue and its lock there (.jobs), its write token unless --token-file names one, "
                "and the entries it is asked to extract")
TOKEN_BYTES = 32


@click.command("serve")
@cache_dir_option
@click.option("--host", default=DEFAULT_HOST, show_default=True,
              help="Address to listen on; 0.0.0.0 opens it to the network.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port to listen on.")
@click.option("--token-file", type=UserPath(dir_okay=False), default=None,
              help=f"File holding the write token. Default: ROOT/{TOKEN_FILE}, created (mode 0600) when missing.")
@click.option("--read-token-file", type=UserPath(exists=True, dir_okay=False), default=None,
              help="File holding a token that reads need too. Default: reads are open.")
@click.option("--runs", "runs", type=UserPath(file_okay=False), multiple=True,
              help="A run folder (train-head --out, layerfuse sweep --out) the page shows; repeatable.")
@click.option("--data-dir", "data_dirs", type=UserPath(exists=True, file_okay=False), multiple=True,
              help="A directory whose datasets jobs may name by path; repeatable. Default: none (jobs name "
                   "datasets the readers know, such as wnut16 or conll03).")
@device_option
@click.option("--max-size", default=None,
              help="After each job, remove the least recently read entries until the root fits (500M, 20G).")
@click.option("--trust-remote-code", is_flag=True,
              help="Allow model code from the hub to run in jobs (off by default).")
@friendly_errors(interrupted=NOTHING_TO_RESUME)
def main(cache_dir, host, port, token_file, read_token_file, runs, data_dirs, device, max_size, trust_remote_code):
    """Serve a cache root: complete entries as read-only zarr over HTTP (train-head --cache
    http://HOST:PORT/entries/NAME), a JSON API, an extraction queue and a web page."""
    try:
        import uvicorn

        from ..serve.app import create_app
        from ..serve.guard import server_options
    except ModuleNotFoundError as exc:  # the service's packages are an extra, not a dependency
        package = (exc.name or "").split(".")[0]
        if package not in SERVE_EXTRA:
            raise
        raise LayerfuseError(f"serve needs the package {package!r}, part of the serve extra: "
                              f'pip install "layerfuse[serve]"') from None

    root = checked_root(cache_dir, write=True, writes=SERVE_WRITES)  # a file, or read-only: one line
    if is_remote(root):
        raise OptionError(f"serve needs a local cache root, not {root}")
    root = Path(local_path(root)).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if token_file:
        token, where = read_token(token_file), Path(token_file)
    else:
        token, where = ensure_token(root / TOKEN_FILE), root / TOKEN_FILE
    shown = f"[{host}]" if ":" in host else host  # as a URL (and a Host header) names it: IPv6 bracketed
    state = ServerState(root=root, token=token, read_token=read_token(read_token_file) if read_token_file else None,
                        runs=[Path(r).resolve() for r in runs], trust_remote_code=trust_remote_code, device=device,
                        max_size=_size(max_size), data_dirs=[Path(d).resolve() for d in data_dirs],
                        private=[Path(p).resolve() for p in (where, read_token_file) if p],
                        hosts=(*LOOPBACK_HOSTS, shown) if _loopback(host) else None)
    held = _only_server(root)  # before the queue reads its jobs: a second server would requeue the first's
    port = _port_to_listen(host, port)  # --port 0: the port is named in the banner, not left to uvicorn's line
    say(f"serving {root} on http://{shown}:{port}/ (write token in {where}; send it as 'Authorization: Bearer ...')")
    if state.read_token is None and not _loopback(host):
        say(f"reads are open to anyone who can reach {host}:{port}; --read-token-file closes them")
    _log_jobs()
    try:
        uvicorn.run(create_app(state), **server_options(host=host, port=port))
    finally:
        os.close(held)


def _log_jobs() -> None:
    """The server's own lines (a job started, done or failed) on stderr beside uvicorn's: left to Python's
    defaults, only warnings showed, and an operator saw no sign of a job."""
    import logging

    log = logging.getLogger("layerfuse.serve")
    log.setLevel(logging.INFO)
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))  # as uvicorn's lines
        log.addHandler(handler)


def _port_to_listen(host: str, port: int) -> int:
    """``port``, checked free on ``host`` now (0: one the system has free): a port in use is one line
    before the banner, not uvicorn's error after it and after the job queue started. Another process
    could take it before uvicorn binds: then uvicorn says so and the server stops."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a port in TIME_WAIT is free
        try:
            s.bind((host, port))
        except OSError as exc:
            raise LayerfuseError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None
        return s.getsockname()[1]


SERVER_LOCK = ".server.lock"  # under the root's jobs folder: one server per root, as its job queue is the root's


def _only_server(root: Path) -> int:
    """An exclusive lock on the root's server lock file, held until the process ends (its descriptor)."""
    import fcntl

    from ..files import flocked
    from ..serve.jobqueue import JOBS_DIR

    (root / JOBS_DIR).mkdir(exist_ok=True)
    fd = os.open(root / JOBS_DIR / SERVER_LOCK, os.O_RDWR | os.O_CREAT, 0o666)  # no secret in it: the umask decides
    try:
        flocked(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, str(root / JOBS_DIR / SERVER_LOCK))
    except BlockingIOError:
        os.close(fd)
        raise LayerfuseError(f"another layerfuse serve runs on {root}: one server per cache root (its job queue "
                              "is the root's); stop it, or serve another --cache-dir") from None
    except OSError:  # no locks there (`files.LocksUnsupported`): said naming the file
        os.close(fd)
        raise
    return fd


def read_token(path: str | os.PathLike) -> str:
    token = Path(path).read_text(encoding="utf-8").strip()
    if not token:
        raise LayerfuseError(f"token file {path} is empty")
    return token


def ensure_token(path: Path) -> str:
    """The token in ``path``, created first when missing: readable by its owner only from the start
    (O_EXCL with mode 0600, no window where the umask's mode applies)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if os.stat(path).st_mode & 0o077:
            say(f"warning: {path} is readable by others than its owner (chmod 600 {path})")
        return read_token(path)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(secrets.token_urlsafe(TOKEN_BYTES) + "\n")
    return read_token(path)


def _size(text: str | None) -> int | None:
    if text is None:
        return None
    from ..cache.gc import parse_size

    return parse_size(text)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


if __name__ == "__main__":
    main()
