"""CLI plumbing: turn LayerfuseError (and a few expected OS errors) into one line and exit 1."""

from __future__ import annotations

import functools
import sys

import click

from ..errors import LayerfuseError


def settle_reads() -> None:
    """zarr's reads still in flight, cancelled before exiting on an error (`cache.store.settle_reads`):
    only where zarr was used, so a command that never read the cache does not import it."""
    if "zarr" in sys.modules:
        from ..cache.store import settle_reads as settle

        settle()


RESUMES = "interrupted; rerun the same command to resume"


def friendly_errors(fn=None, *, interrupted: str = RESUMES):
    """``@friendly_errors`` or ``@friendly_errors(interrupted=...)``: ``interrupted`` is what Ctrl-C prints,
    true of the command (a command that keeps no partial work must not promise a resume)."""
    if fn is None:
        return functools.partial(friendly_errors, interrupted=interrupted)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except LayerfuseError as exc:
            settle_reads()
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except OSError as exc:  # disk full, permissions: name the file, not a traceback
            settle_reads()
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            click.echo(f"error: {exc.strerror or exc}{where}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo(interrupted, err=True)
            sys.exit(130)

    return wrapper

