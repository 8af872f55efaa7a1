"""The console scripts and ``python -m layerfuse``: each imports its command when called, so that
Ctrl-C while the command loads (torch alone takes seconds to import) ends in one line and exit 130,
as it does once the command runs (`errors.friendly_errors`), rather than in a traceback."""

from __future__ import annotations

import importlib
import sys

LOADING = "interrupted while loading; nothing was done"


def command(module: str, name: str = "main"):
    """``module``'s attribute ``name``, imported now; Ctrl-C meanwhile is one line and exit 130."""
    try:
        return getattr(importlib.import_module(module), name)
    except KeyboardInterrupt:
        print(LOADING, file=sys.stderr)
        sys.exit(130)


def layerfuse():
    return command("layerfuse.cli.main")()


def extract():
    return command("layerfuse.cli.extract")()


def train_head():
    return command("layerfuse.cli.train")()
