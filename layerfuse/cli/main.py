"""`layerfuse`: one command group holding every command.

``layerfuse extract | train-head | sweep | rank-layers | probe | predict | export | ls | info | rm | verify |
gc | serve``.
`extract` and `train-head` are also console scripts of their own (the design card's commands).
The group's old names `train` and `rank` still work, hidden from --help.
"""

from __future__ import annotations

import click

# name -> (module of layerfuse.cli, its command, the line `layerfuse --help` lists it with). A command's
# module is imported when the command runs: most import torch (seconds), which `--help` and `--version`
# need not wait for.
COMMANDS = {
    "extract": ("extract", "main", "Run a frozen encoder once over a dataset; cache every layer."),
    "train-head": ("train", "main", "Train a fusion head from the cache; report its best dev score."),
    "sweep": ("sweep", "main", "Run a grid of heads from one cache, then report on it."),
    "rank-layers": ("rank", "main", "Rank the cached layers by variability nu (lower = better)."),
    "probe": ("probe", "main", "Probe every cached layer with a linear classifier."),
    "predict": ("predict", "main", "Tag text with a trained head, or score it on a CoNLL file."),
    "export": ("export", "main", "Write a trained head with its backbone as a transformers model."),
    "ls": ("cache", "ls_cmd", "List the entries of a cache root, newest first."),
    "info": ("cache", "info_cmd", "Show an entry's metadata and splits."),
    "rm": ("cache", "rm_cmd", "Delete an entry (a damaged one too)."),
    "verify": ("cache", "verify_cmd", "Re-read every chunk of an entry against its checksum."),
    "gc": ("cache", "gc_cmd", "Evict the least recently read entries down to a size."),
    "serve": ("serve", "main", "Serve a cache root over HTTP: entries, API, jobs, a page."),
}
HIDDEN_ALIASES = {"train": "train-head", "rank": "rank-layers"}  # the group's names before they matched the scripts


class _Group(click.Group):
    """Loads a command when it runs (`COMMANDS`), lists each by its declared line in `COMMANDS`' order
    (a job's order: extract, then train), and finds one by its old name too, unlisted."""

    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, cmd_name):
        name = HIDDEN_ALIASES.get(cmd_name, cmd_name)
        if name not in COMMANDS:
            return None
        from .launch import command

        module, attribute, _ = COMMANDS[name]
        return command(f"layerfuse.cli.{module}", attribute)

    def format_commands(self, ctx, formatter):
        with formatter.section("Commands"):
            formatter.write_dl([(name, line) for name, (_, _, line) in COMMANDS.items()])

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        return HIDDEN_ALIASES.get(name, name), command, rest  # usage and errors give the current name


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="layerfuse")
def main():
    """Cache every layer of a frozen encoder once; train few-shot fusion heads from the cache."""


if __name__ == "__main__":
    main()
