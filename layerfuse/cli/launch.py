"""The console scripts and ``python -m layerfuse``: each imports its command when called, so that
Ctrl-C while the command loads (torch alone takes seconds to import) ends in one line and exit 130,
as it does once the command runs (`errors.friendly_errors`), rather than in a traceback."""

from __future__ import annotations

import importlib
import signal
import sys

from .errors import Terminated, exit_code

LOADING = "interrupted while loading; nothing was done"


def command(module: str, name: str = "main"):
    """``module``'s attribute ``name``, imported now; Ctrl-C meanwhile is one line and exit 130."""
    try:
        return getattr(importlib.import_module(module), name)
    except KeyboardInterrupt as exc:
        print(LOADING, file=sys.stderr)
        sys.exit(exit_code(exc))
    except ModuleNotFoundError as exc:
        if exc.name not in POSIX_MODULES:
            raise
        sys.exit(f"error: layerfuse needs a POSIX system (Linux or macOS): this Python has no {exc.name} module, "
                 "which its file locks use (on Windows, run it under WSL)")


# What the commands import from POSIX alone: pip installs layerfuse on Windows, where each was a traceback.
POSIX_MODULES = ("fcntl", "resource")


def terminate_as_interrupt() -> None:
    """SIGTERM (a scheduler's time limit, `kill`) ends a command as Ctrl-C does: its cleanup runs (locks,
    half-written files), it says what was kept, and it exits 143, where Python's default died mid-step
    in silence. A SIGTERM this process inherited ignored stays ignored."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)


def _raise_terminated(signum, frame):
    raise Terminated()


def _script(module: str, name: str = "main"):
    """A console script that runs ``module``'s command ``name``; ``loads`` names that command
    (``module:name``), for whoever runs it in process (the docs' tests, with click's runner)."""
    def run():
        terminate_as_interrupt()
        return command(module, name)()

    run.loads = f"{module}:{name}"
    return run


layerfuse = _script("layerfuse.cli.main")
extract = _script("layerfuse.cli.extract")
train_head = _script("layerfuse.cli.train")
