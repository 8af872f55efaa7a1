"""`layercache`: one command group holding every command.

``layercache extract | train | sweep | rank | predict | ls | info | rm | verify | gc | serve``. The design
card's names (`extract`, `train-head`, `sweep`, `rank-layers`, `predict`) are console scripts of
the very same click commands.
"""

from __future__ import annotations

import click

from . import cache, extract, predict, rank, serve, sweep, train


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="layercache")
def main():
    """Cache every layer of a frozen encoder once; train few-shot fusion heads from the cache."""


for name, command in {
    "extract": extract.main,
    "train": train.main,
    "sweep": sweep.main,
    "rank": rank.main,
    "predict": predict.main,
    "ls": cache.ls_cmd,
    "info": cache.info_cmd,
    "rm": cache.rm_cmd,
    "verify": cache.verify_cmd,
    "serve": serve.main,
    "gc": cache.gc_cmd,
}.items():
    main.add_command(command, name=name)


if __name__ == "__main__":
    main()
