"""The options of the cache-management commands (`ls`, `info`, `rm`, `verify`, `gc`), apart from
`options`: that module reads the configs' defaults and so imports torch, which these commands, reading
numpy only, should not wait for."""

from __future__ import annotations

import click

CACHE_DIR_HELP = "Cache root (path or fsspec URL). Default: $LAYERFUSE_HOME or ~/.cache/layerfuse."
cache_dir_option = click.option("--cache-dir", default=None, help=CACHE_DIR_HELP)
quiet_option = click.option("--quiet", is_flag=True, help="No progress bar.")
