"""CLI plumbing: turn LayerfuseError (and a few expected OS errors) into one line and exit 1; an OptionError
(a bad option value) into click's usage error and exit 2, as click ends on the values it checks itself."""

from __future__ import annotations

import contextlib
import functools
import os
import select
import sys

import click

from ..errors import LayerfuseError, OptionError


def settle_reads() -> None:
    """zarr's reads still in flight, cancelled before exiting on an error (`cache.store.settle_reads`):
    only where zarr was used, so a command that never read the cache does not import it."""
    if "zarr" in sys.modules:
        from ..cache.store import settle_reads as settle

        settle()


def http_refusal(exc: BaseException) -> str | None:
    """One line for an HTTP cache root's refusal (aiohttp's ClientResponseError, raised through fsspec
    and zarr): the URL and status, and for a 401 where the read token goes; None for any other error."""
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is None or not isinstance(exc, aiohttp.ClientResponseError):
        return None
    hint = (" (the server reads with a token: FSSPEC_HTTP='{\"headers\": {\"Authorization\": \"Bearer ...\"}}')"
            if exc.status == 401 else "")
    return f"{exc.request_info.real_url} answered {exc.status} {exc.message}{hint}"


def unreachable(exc: BaseException) -> str | None:
    """One line for a remote cache root that cannot be reached or read (botocore's errors: no
    credentials, an endpoint that does not answer; aiohttp's: a server gone mid-read), found anywhere in
    the chain zarr and fsspec raise them through; None for any other error."""
    cause = _remote_cause(exc)
    if cause is None:
        return None
    text = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return f"the cache root could not be read ({type(cause).__name__}: {text[:300]})"


def _remote_cause(exc: BaseException | None) -> BaseException | None:
    """The first error of botocore or aiohttp (an object store's, an HTTP root's) in ``exc``'s chain."""
    for _ in range(10):
        if exc is None or type(exc).__module__.startswith(("botocore", "aiohttp")):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def remote_root_given(exc: OSError, options: dict) -> str:
    """" (URL)" of the remote root or entry the command was given, for an object store's error that names
    no file (s3fs turns a 403 into a bare ``PermissionError('Forbidden')``); "" otherwise."""
    urls = [value for value in options.values() if isinstance(value, str) and "://" in value]
    return f" ({', '.join(urls)})" if urls and _remote_cause(exc) is not None else ""


def out_of_memory(exc: BaseException) -> str | None:
    """One line for running out of memory (Python's MemoryError, torch's allocators on a CPU or a GPU),
    with what to lower; None for any other error."""
    text = (str(exc).strip().splitlines() or [""])[0]
    if not (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
            or "can't allocate memory" in text or "out of memory" in text.lower()):
        return None
    return (f"out of memory{f' ({text[:200]})' if text else ''}: lower --batch-size or --token-budget, "
            "shorten what one batch holds, take a smaller head (--extra-layers), or free memory")


RESUMES = "interrupted; rerun the same command to resume"
NOTHING_TO_RESUME = "interrupted"  # a command that keeps no partial work (a read, a listing, a tagging)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is (`launch.terminate_as_interrupt`): ends as Ctrl-C does."""


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """128 + the signal's number, as a shell reports a process the signal ended: 143 for SIGTERM, 130 for Ctrl-C."""
    return 143 if isinstance(interrupt, Terminated) else 130


def _stdout_gone() -> bool:
    """Whether the reader of stdout went away: its pipe reports an error when polled. A stream with no
    descriptor (a test's capture) counts as gone, as the one place a broken pipe can come from."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def friendly_errors(fn=None, *, interrupted: str = RESUMES):
    """``@friendly_errors`` or ``@friendly_errors(interrupted=...)``: ``interrupted`` is what Ctrl-C prints,
    true of the command (a command that keeps no partial work must not promise a resume)."""
    if fn is None:
        return functools.partial(friendly_errors, interrupted=interrupted)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except OptionError as exc:  # click prints it (usage, a hint, the line) and exits 2
            settle_reads()
            raise click.UsageError(str(exc), click.get_current_context(silent=True)) from None
        except LayerfuseError as exc:
            settle_reads()
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except BrokenPipeError as exc:  # the reader went away (`| head`): quiet, as a Unix tool ends (128 + SIGPIPE)
            if not _stdout_gone():  # another pipe (a worker's): said, where a batch log showed nothing and 141
                settle_reads()
                with contextlib.suppress(BrokenPipeError):  # stderr's reader gone too: nothing can be said
                    click.echo(f"error: {exc.strerror or exc} (a pipe to another process, not the output)",
                               err=True)
                    sys.exit(1)
            try:  # stdout to /dev/null: Python's own flush at exit would fail on the pipe again
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError):  # no file descriptor (a test's captured stream)
                pass
            sys.exit(141)
        except OSError as exc:  # disk full, permissions: name the file, not a traceback
            settle_reads()
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else remote_root_given(exc, kwargs)
            # an object store's FileNotFoundError carries only its key: say what it is
            what = exc.strerror or (f"not found: {exc}" if isinstance(exc, FileNotFoundError) else exc)
            click.echo(f"error: {what}{where}", err=True)
            sys.exit(1)
        except KeyboardInterrupt as exc:
            click.echo(interrupted, err=True)
            sys.exit(exit_code(exc))
        except Exception as exc:  # MemoryError included
            refusal = http_refusal(exc) or out_of_memory(exc) or unreachable(exc)
            if refusal is None:
                raise
            settle_reads()
            click.echo(f"error: {refusal}", err=True)
            sys.exit(1)

    return wrapper

