"""The options of the cache-management commands (`ls`, `info`, `rm`, `verify`, `gc`), apart from
`options`: that module reads the configs' defaults and so imports torch, which these commands, reading
numpy only, should not wait for."""

from __future__ import annotations

import click

from ..cache.layout import home_path
from ..errors import LayerfuseError


class UserPath(click.Path):
    """A path option or argument whose leading ``~`` is the home folder. The shell leaves it as written
    in ``--out=~/runs`` or ``"~/runs"``: without this, a folder named ~ was made, or nothing was found.
    ``click.Path``'s checks are its own; ``UserPath(readable=False)`` checks nothing and only expands.
    A name that is not a path (a hub model, an fsspec URL) does not start with ~ and is kept as it is."""

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            try:
                value = home_path(value)
            except LayerfuseError as exc:
                self.fail(str(exc), param, ctx)
        return super().convert(value, param, ctx)


NAME_OR_PATH = UserPath(readable=False)  # a path, or a name that is none (a hub model, a URL): ~ expanded, no checks
CACHE_DIR_HELP = "Cache root (path or fsspec URL). Default: $LAYERFUSE_HOME or ~/.cache/layerfuse."
cache_dir_option = click.option("--cache-dir", type=NAME_OR_PATH, default=None, help=CACHE_DIR_HELP)
quiet_option = click.option("--quiet", is_flag=True, help="No progress bar.")
