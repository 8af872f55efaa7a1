"""The bare console scripts `sweep`, `rank-layers` and `predict`, kept so that nothing breaks: each
says once, on stderr, that it is now `layerfuse <verb>`, then runs that command unchanged."""

from __future__ import annotations

import sys

import click


def _alias(verb: str):
    def run():
        from .launch import command

        main = command("layerfuse.cli.main")
        click.echo(f"`{verb}` is deprecated and will go; use `layerfuse {verb}`", err=True)
        main(args=[verb, *sys.argv[1:]], prog_name="layerfuse")

    run.__name__ = run.__qualname__ = verb.replace("-", "_")
    run.__doc__ = f"The deprecated `{verb}` script: `layerfuse {verb}`."
    return run


sweep = _alias("sweep")
rank_layers = _alias("rank-layers")
predict = _alias("predict")
