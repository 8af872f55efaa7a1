"""`layerfuse`: one command group holding every command.

``layerfuse extract | train-head | sweep | rank-layers | probe | predict | export | ls | info | rm | verify |
gc | serve``.
`extract` and `train-head` are also console scripts of their own (the design card's commands).
The group's old names `train` and `rank` still work, hidden from --help.
"""

from __future__ import annotations

import click

from . import cache, export, extract, predict, probe, rank, serve, sweep, train

COMMANDS = {
    "extract": extract.main,
    "train-head": train.main,
    "sweep": sweep.main,
    "rank-layers": rank.main,
    "probe": probe.main,
    "predict": predict.main,
    "export": export.main,
    "ls": cache.ls_cmd,
    "info": cache.info_cmd,
    "rm": cache.rm_cmd,
    "verify": cache.verify_cmd,
    "gc": cache.gc_cmd,
    "serve": serve.main,
}
HIDDEN_ALIASES = {"train": "train-head", "rank": "rank-layers"}  # the group's names before they matched the scripts


class _Group(click.Group):
    """Finds a command by its old name too, without listing the old name in --help; lists the commands
    in `COMMANDS`' order (a job's order: extract, then train), not alphabetically."""

    def list_commands(self, ctx):
        return list(self.commands)

    def get_command(self, ctx, cmd_name):
        return super().get_command(ctx, HIDDEN_ALIASES.get(cmd_name, cmd_name))

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        return HIDDEN_ALIASES.get(name, name), command, rest  # usage and errors give the current name


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="layerfuse")
def main():
    """Cache every layer of a frozen encoder once; train few-shot fusion heads from the cache."""


for name, command in COMMANDS.items():
    main.add_command(command, name=name)


if __name__ == "__main__":
    main()
