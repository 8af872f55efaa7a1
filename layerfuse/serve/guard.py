"""The server against hostile or broken clients: a deadline for reading each request, a cap on open
connections below the process's descriptor limit, logs that stay bounded, and no token in them.

uvicorn's h11 protocol waits forever for a request's headers and body, so idle half-sent requests pile up
until the process runs out of descriptors and asyncio logs a traceback per refused accept. `GuardedH11` closes
a connection whose request (headers and body) is not all in within `READ_SECONDS` of its first byte (or of the
connection), and one that takes in nothing of a response for `STALL_SECONDS` while the server waits to send
(its entry stays held as long as the response is open, so `gc` and `rm` would wait on a client that stopped
reading, or one cut off with no close); beyond the cap, it drops the client that has waited longest without
sending a whole request (so slow clients never crowd out healthy ones), or refuses the newcomer. Whatever it
refuses is counted and logged once per class and `LOG_INTERVAL` (`OncePerInterval`), as are uvicorn's and
asyncio's per-connection warnings, without tracebacks. The access log never shows a query string: a client
that puts a token there (where this server never reads one) does not get it written to disk.
"""

from __future__ import annotations

import logging
import resource
import time

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

READ_SECONDS = 10.0  # a request's headers and body must be in within this of its first byte
STALL_SECONDS = 30.0  # a client that takes in no byte of a response for this long is cut off
KEEP_ALIVE_SECONDS = 5  # an idle keep-alive connection is closed after this (uvicorn's timeout_keep_alive)
CONNECTION_CAP = 1000  # open connections at most, and never more than half the descriptor limit
LOG_INTERVAL = 60.0  # seconds between two log lines of one class of refused client
log = logging.getLogger("layerfuse.serve")


def connection_cap() -> int:
    """`CONNECTION_CAP`, or half the soft descriptor limit if that is lower: the rest stays for the
    entries' files, the job queue and the log."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return CONNECTION_CAP if soft == resource.RLIM_INFINITY else max(8, min(CONNECTION_CAP, soft // 2))


class OncePerInterval(logging.Filter):
    """Passes the first record of each message (its format string) per interval, worded with the count
    the interval held, and without a traceback; drops the rest. Records above ``max_level`` pass as they are."""

    def __init__(self, interval: float = LOG_INTERVAL, max_level: int = logging.CRITICAL):
        super().__init__()
        self.interval, self.max_level, self.seen = interval, max_level, {}  # msg -> (window start, count)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > self.max_level:
            return True
        now, key = time.monotonic(), str(record.msg)
        start, count = self.seen.get(key, (None, 0))
        if start is not None and now - start < self.interval:
            self.seen[key] = (start, count + 1)
            return False
        self.seen[key] = (now, 1)
        if count > 1:
            record.msg = f"{record.msg} (and {count - 1} more like it in the last {now - start:.0f} s)"
        if record.exc_info:  # one line: the exception's type and text, not its traceback
            exc = record.exc_info[1]
            record.msg = f"{record.msg}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            record.exc_info = record.exc_text = None
        return True


class NoQueryString(logging.Filter):
    """uvicorn's access log line without the request's query string."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) >= 3 and isinstance(record.args[2], str):
            record.args = (*record.args[:2], record.args[2].partition("?")[0], *record.args[3:])
        return True


class NoSecrets(logging.Filter):
    """A log line with a token in it (a dataset file that is the token file, quoted by a reader's error)
    gets ``<token>`` in its place: tokens never appear in a log."""

    def __init__(self, secrets):
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if any(secret in text for secret in self.secrets):
            for secret in self.secrets:
                text = text.replace(secret, "<token>")
            record.msg, record.args = text, ()
        return True


def hide_secrets(*secrets: str | None) -> None:
    """Install `NoSecrets` for ``secrets`` on this package's server log and on uvicorn's access log (a
    token sent in a URL's path would be logged there); one filter each: a new server's tokens replace
    the last one's."""
    for logger in (log, logging.getLogger("uvicorn.access")):
        for old in [f for f in logger.filters if isinstance(f, NoSecrets)]:
            logger.removeFilter(old)
        logger.addFilter(NoSecrets(secrets))


refused = OncePerInterval()


def _refuse(why: str) -> None:
    record = log.makeRecord(log.name, logging.WARNING, __file__, 0, why, None, None)
    if log.isEnabledFor(logging.WARNING) and refused.filter(record):
        log.handle(record)


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a read deadline per request and a cap on open connections."""

    cap = CONNECTION_CAP  # set from `connection_cap()` by `server_config`
    _deadline = None
    _stall = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.cap:
            # Room is made by dropping the client that has waited longest without sending a whole request:
            # slow clients cannot crowd out healthy ones. With none such (all are being answered), refuse.
            waiting = [c for c in self.connections if c is not self and getattr(c, "_deadline", None) is not None]
            if not waiting:
                _refuse(f"refused a client: {self.cap} connections are open (the cap) and all are being answered")
                transport.abort()
                return
            _refuse(f"dropped a client that sent no whole request: {self.cap} connections are open (the cap)")
            min(waiting, key=lambda c: c._since).transport.abort()
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and self.conn.their_state is h11.IDLE:  # the next request of a kept-alive one
            self._arm()
        super().data_received(data)
        if self._deadline is not None and self.conn.their_state is not h11.IDLE and \
                self.conn.their_state is not h11.SEND_BODY:  # the whole request is in (or the connection ends)
            self._deadline.cancel()
            self._deadline = None

    def connection_lost(self, exc) -> None:
        for timer in (self._deadline, self._stall):
            if timer is not None:
                timer.cancel()
        self._deadline = self._stall = None
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        """The client's socket is full: it must take some of the response within `STALL_SECONDS`."""
        super().pause_writing()
        if self._stall is None:
            self._stall = self.loop.call_later(STALL_SECONDS, self._stalled)

    def resume_writing(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        super().resume_writing()

    def _stalled(self) -> None:
        self._stall = None
        _refuse(f"closed a client that took in nothing of a response for {STALL_SECONDS:g} s")
        self.transport.abort()

    def _arm(self) -> None:
        self._since = self.loop.time()
        self._deadline = self.loop.call_later(READ_SECONDS, self._too_slow)

    def _too_slow(self) -> None:
        self._deadline = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
            _refuse(f"closed a client that sent no whole request within {READ_SECONDS:g} s")
            self.transport.abort()


def server_options(*, host: str, port: int, log_level: str = "info", access_log: bool = True) -> dict:
    """The options of `uvicorn.Config` (and `uvicorn.run`) every server of this package runs with; installs
    the log filters."""
    GuardedH11.cap = connection_cap()
    # Per-connection noise, one line a minute: uvicorn's warnings (an application's errors keep their
    # tracebacks) and asyncio's transport and accept errors.
    for name, level in (("uvicorn.error", logging.WARNING), ("asyncio", logging.CRITICAL)):
        if not any(isinstance(f, OncePerInterval) for f in logging.getLogger(name).filters):
            logging.getLogger(name).addFilter(OncePerInterval(max_level=level))
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, NoQueryString) for f in access.filters):
        access.addFilter(NoQueryString())
    return dict(host=host, port=port, log_level=log_level, access_log=access_log, lifespan="on", http=GuardedH11,
                timeout_keep_alive=KEEP_ALIVE_SECONDS)
