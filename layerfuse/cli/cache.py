"""Cache management: `layerfuse ls | info PATH | rm PATH | verify PATH | gc --max-size SIZE`."""

from __future__ import annotations

import json
import os
import posixpath
import sys

import click

from ..cache import label_sets
from ..cache.gc import collect, parse_size, said_last_used
from ..cache.layout import is_remote, local_path, subgroups
from ..cache.manage import (
    bytes_on_disk,
    differences,
    entry_status,
    finished_seconds,
    in_future,
    is_damaged_entry,
    list_entries,
    options_label,
    quick_check,
    refuse_link,
    refuse_unremovable,
    remove,
    told_apart,
    variants,
    verify,
)
from ..cache.manifest import REPAIR
from ..cache.store import open_group
from ..display import human_bytes
from ..errors import LayerfuseError
from ..tasks import task_of
from .errors import NOTHING_TO_RESUME, friendly_errors
from .light_options import NAME_OR_PATH, cache_dir_option, quiet_option
from .progress import show_progress
from .roots import checked_root


def _why_empty(root: str) -> str:
    """What may explain an empty listing: a local root that is not there, a server's address without its
    ``/entries`` (``layerfuse serve`` serves the root there)."""
    if not is_remote(root):
        return "" if os.path.isdir(local_path(root)) else " (no such folder)"
    if root.startswith(("http://", "https://")) and not root.rstrip("/").endswith("/entries"):
        return f" (a layerfuse server serves its root at {root.rstrip('/')}/entries)"
    return ""


@click.command("ls")
@cache_dir_option
@friendly_errors(interrupted=NOTHING_TO_RESUME)
def ls_cmd(cache_dir):
    """List entries, newest first, with the options that tell them apart (rows/pooling, storage
    dtype, forward precision, max length)."""
    root = checked_root(cache_dir, write=False)
    damaged: list[str] = []
    newer: list[str] = []  # a root shared with someone who upgraded: said, not a failure of `ls`
    entries = list_entries(root, damaged=damaged, newer=newer)
    for reason in newer:
        click.echo(f"note: {reason}", err=True)
    if not entries and not damaged and not newer:
        click.echo(f"no entries under {root}{_why_empty(root)}")
        return
    remote = is_remote(root)
    for e in entries:
        state = ", ".join(f"{s}{'' if ok else ' (incomplete)'}" for s, ok in e.splits.items())
        click.echo(f"{e.path}\n    {e.model} on {e.dataset} [{options_label(e.fields)}{told_apart(e, entries)}]: "
                   f"{state}; {human_bytes(e.bytes_on_disk)}; {e.finished or 'unfinished'}{_if_future(e.finished)}")
        if e.missing:
            click.echo(f"    incomplete: {', '.join(e.missing)} not finished; rerun `extract` to finish")
        # Listed as complete only once its files are there and its metadata is as recorded (no chunk is
        # read: `verify` does that); over a remote root, a request per file is not cheap: not checked.
        problems = [] if remote else _quick_problems(e.path)
        if problems:
            click.echo(f"    damaged: {len(problems)} problem{'s' if len(problems) > 1 else ''} found without "
                       "reading a chunk; `layerfuse verify` lists them")
            damaged.append(_first_of(problems))
    for reason in damaged:  # after the readable ones, which it never hides
        click.echo(f"error: {reason}", err=True)
    if damaged:
        sys.exit(1)


def _if_future(finished: str | None) -> str:
    """A finish time later than this machine's clock is listed last, as unknown: said beside it."""
    return " (later than this machine's clock: listed as unknown)" if in_future(finished_seconds(finished)) else ""


@click.command("info")
@click.argument("path", type=NAME_OR_PATH)
@click.option("--json", "as_json", is_flag=True, help="All metadata as JSON.")
@friendly_errors(interrupted=NOTHING_TO_RESUME)
def info_cmd(path, as_json):
    """Show an entry's metadata and splits."""
    group = open_group(path, mode="r")
    status = entry_status(path, group=group)  # refuses a group that is no entry before anything is shown
    meta = dict(group.attrs)
    splits = {name: {**dict(g.attrs), "hidden_shape": _hidden_shape(path, name, g)} for name, g in subgroups(group)
              if "kind" not in g.attrs}  # `kind`: the MLM entry's `lm` group, not a split
    if as_json:
        click.echo(json.dumps({"path": path, "meta": meta, "splits": splits}, indent=2, default=str))
        return
    click.echo(f"{path}")
    click.echo(f"  model      {meta['model']} ({meta['model_type']}, revision {meta['model_revision']})")
    click.echo(f"  layers     {meta['num_layers']} + embeddings, width {meta['hidden_size']}")
    click.echo(f"  dataset    {meta['dataset']} from {meta['dataset_source']} "
               f"(fingerprint {meta['dataset_fingerprint'][:12]})")
    if task_of(meta).masks_inputs:
        click.echo(f"  task       {meta['task']}: blocks of {meta['block_size']} subwords, "
                   f"{meta['mlm_probability']:.0%} masked "
                   f"(seed {meta['mask_seed']}), vocabulary {meta['vocab_size']:,}, LM head: {meta['lm_head']}")
    else:
        for name, info in label_sets.listed(meta).items():
            names = info["names"]
            shown = ", ".join(names) if len(names) <= 12 else ", ".join(names[:12]) + f", ... ({len(names)} in all)"
            click.echo(f"  labels     {name} ({info['kind']}): {shown}")
            origin = label_sets.origin_of(meta, name)  # a set added from other files of the same words
            if origin and origin["dataset_source"] != meta.get("dataset_source"):
                click.echo(f"             read from {origin['dataset_source']}")
    click.echo(f"  storage    {meta['granularity']} rows, pooling {meta['pooling']}, {meta['dtype']}, "
               f"forward {meta['precision']}, max length {meta['max_length']}")
    click.echo(f"  on disk    {human_bytes(status.bytes_on_disk)}")
    for other in _variants(path, status):
        click.echo(f"  variant    {other.path} ({how_it_differs(status.fields, other.fields)})")
    problems = _quick_problems(path)  # files there, metadata as recorded; chunks unread (`verify` reads them)
    for name, a in splits.items():
        state = "complete" if a.get("complete") else "INCOMPLETE (rerun extract to resume)"
        if a.get("complete") and any(f": array {name}/" in p for p in problems):
            state = "DAMAGED (see below)"
        click.echo(f"  {name:<5} {a['n_sentences']:>8,} sentences {a['n_words']:>10,} words  "
                   f"hidden {a['hidden_shape']}  {state}")
    for name in (n for n in status.missing if n not in splits):
        click.echo(f"  {name:<5} MISSING: asked for and not started (rerun extract to finish the entry)")
    if problems:
        raise LayerfuseError(_first_of(problems))
    click.echo("  checked    every file listed is there, metadata as recorded; chunks not read "
               "(`layerfuse verify` reads them)")


def _quick_problems(path: str) -> list[str]:
    try:
        return quick_check(path)
    except LayerfuseError as exc:
        return [str(exc)]


def _first_of(problems: list[str]) -> str:
    more = len(problems) - 1
    return problems[0] + (f" (and {more} more: `layerfuse verify` lists them)" if more else "")


def _hidden_shape(path: str, split: str, group) -> list[int]:
    if "hidden" not in group:
        raise LayerfuseError(f"{path}: array {split}/hidden is missing (no {split}/hidden/zarr.json); {REPAIR}")
    return list(group["hidden"].shape)


def how_it_differs(fields: dict, other: dict) -> str:
    """What sets another entry of the same model and data apart: its storage options, else whatever else
    its key holds (an MLM entry's masking); never an empty "()"."""
    diff = differences(fields, other) or differences(fields, other, names=tuple(sorted(set(fields) | set(other))))
    return ", ".join(f"{n} {v}" for n, v in diff.items()) or "the same settings, made apart"


def _variants(path: str, status):
    """The other entries of this model and dataset beside ``path``: which one a head reads is a choice."""
    root, name = posixpath.split(path.rstrip("/"))
    return [e for e in variants(root or ".", status.fields) if posixpath.basename(e.path.rstrip("/")) != name]


@click.command("rm")
@click.argument("path", type=NAME_OR_PATH)
@click.option("--yes", is_flag=True, help="Do not ask.")
@friendly_errors(interrupted=NOTHING_TO_RESUME)
def rm_cmd(path, yes):
    """Delete an entry; a damaged one too (its metadata cannot be read), which no command can use and
    `extract` will not write over."""
    if not is_remote(path):  # `.` (inside the entry) made the lock file `..lock` in it, and the rename failed
        path = os.path.abspath(local_path(path))
    damaged = is_damaged_entry(path)  # refuses what is no entry
    refuse_link(path)  # before the question, not after a "y"
    refuse_unremovable(path)
    said = " (a damaged entry: its metadata cannot be read)" if damaged else ""
    if not yes and not _confirmed(f"delete {path}{said}?"):
        return
    remove(path, readable=not damaged)
    click.echo(f"removed {path}{said}")


def _confirmed(question: str) -> bool:
    """The answer read from stdin. None to read (stdin at its end or closed, as a batch job's is) is one line
    naming --yes: it was a bare "Aborted!", or a 30-line traceback with stdin closed."""
    try:
        return click.confirm(question, default=False, err=True)
    except (click.Abort, RuntimeError):  # RuntimeError: "input(): lost sys.stdin"
        if sys.stdin is not None and sys.stdin.isatty():  # Ctrl-C at a terminal: click's "Aborted!", as ever
            raise click.Abort() from None
        click.echo("", err=True)  # the question's line ends: the error is a line of its own
        raise LayerfuseError("not deleted: no answer was read (stdin ended or is closed, as in a batch job); "
                             "pass --yes to delete without asking") from None


@click.command("verify")
@click.argument("path", type=NAME_OR_PATH)
@quiet_option
@friendly_errors(interrupted=NOTHING_TO_RESUME)
def verify_cmd(path, quiet):
    """Re-read every chunk, check its crc32c checksum, and count non-finite hidden values."""
    problems = verify(path, progress=show_progress(quiet))
    for p in problems:
        click.echo(p, err=True)
    if problems:
        click.echo(f"{len(problems)} problem{'s' * (len(problems) != 1)} in {path} (each named above)", err=True)
        sys.exit(1)
    click.echo(f"ok: every chunk of {path} reads back and matches its checksum; every hidden value is finite")


@click.command("gc")
@click.option("--max-size", required=True, help="Size the root must fit in: bytes, or with K, M, G or T (500M, 20G).")
@click.option("--dry-run", is_flag=True, help="Only list the entries that would be removed.")
@cache_dir_option
@friendly_errors(interrupted=NOTHING_TO_RESUME)
def gc_cmd(max_size, dry_run, cache_dir):
    """Remove the least recently read complete entries until the cache root fits in --max-size;
    never a partial entry, nor one being written or open in a reader (each such is named, with why)."""
    limit = parse_size(max_size)
    root = checked_root(cache_dir, write=not dry_run)  # a file, or read-only: one line, as for every command
    if not is_remote(root) and not os.path.isdir(local_path(root)):  # a mistyped root would read as an empty one
        raise LayerfuseError(f"{'--cache-dir ' + cache_dir if cache_dir else 'the cache root ' + root} does not "
                             "exist: there is nothing to collect")
    verb = "would remove" if dry_run else "removed"
    garbage = []
    leftover = lambda path, size: garbage.append(size) or click.echo(  # noqa: E731
        f"{verb} {path} ({human_bytes(size)}): what a killed removal or extract left")
    skip = lambda e, reason: click.echo(f"skipped {e.path}: {reason}", err=True)  # noqa: E731
    unreadable = []
    damaged = lambda path, size: unreadable.append(size) or click.echo(  # noqa: E731
        f"{verb} {path} ({human_bytes(size)}): its metadata cannot be read (damaged)")
    # read before: a removed entry's record of its last read goes with it, and its finish time was shown instead
    used_at = {e.path: said_last_used(e) for e in list_entries(root, sizes=False)}
    removed = collect(root, max_size=limit, dry_run=dry_run, on_skip=skip, on_damaged=damaged, on_leftover=leftover)
    for e in removed:
        used = used_at.get(e.path) or said_last_used(e)
        click.echo(f"{verb} {e.path} ({e.model} on {e.dataset}, {human_bytes(e.bytes_on_disk)}, {used})")
    root = local_path(root)
    left = bytes_on_disk(root) if os.path.isdir(root) else 0
    n = len(removed) + len(unreadable) + len(garbage)  # every line above that says removed
    count = f"{n} {'entry' if n == 1 else 'entries'}"
    if dry_run:
        left -= sum(e.bytes_on_disk or 0 for e in removed) + sum(garbage) + sum(unreadable)
        click.echo(f"{count} would be removed; {human_bytes(left)} would be left under {root} "
                   f"(limit {human_bytes(limit)})")
    else:
        click.echo(f"{count} removed; {human_bytes(left)} left under {root} (limit {human_bytes(limit)})")
    if left > limit:
        partial = [e.path for e in list_entries(root, sizes=False) if not e.complete]
        named = (f"; partial entries are never removed: {', '.join(partial)} (finish each with its extract, or "
                 "`layerfuse rm` it)") if partial else ""
        said = f"still over the limit: what is left is in use, partial, or not an entry{named}"
        if dry_run:
            click.echo(said, err=True)
        else:  # the root does not fit: a script running gc must not read success
            raise LayerfuseError(said)
