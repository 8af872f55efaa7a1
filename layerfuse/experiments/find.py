"""Finding the cache entry a head trains on: `--cache PATH`, else the entry that `extract` would
make for `--model/--dataset` (extracting it first when missing). With neither, the built-in default
is meant, as `extract` has it (all-MiniLM-L6-v2 on the task's default dataset) when the root holds an
entry of it, else the root's only complete entry of the task; a root of several others is ambiguous:
an error lists them. Which entry was extracted last never decides.

One model and dataset should need one extraction: when the entry `extract`'s defaults would make is
missing but a complete one made with another forward precision or storage dtype is there, that one
is used. One that differs in what a head sees (rows, their pooling, truncation) is not used, and
neither is a new one extracted beside it without being asked for: the user picks."""

from __future__ import annotations

import os

from ..cache.layout import KEY_FIELDS, OPTIONAL_KEY_FIELDS, cache_root, is_remote
from ..cache.manage import (
    EntryStatus,
    differences,
    entry_status,
    list_entries,
    options_label,
    told_apart,
    variants,
)
from ..cache.reader import CacheEntry, MetaViews, open_entry
from ..cache.store import exists
from ..display import first_few
from ..errors import LayerfuseError
from ..tasks import task_of

# How an entry was made: a head reads the same rows, numerically close, whichever was used.
RELAXABLE = ("precision", "dtype")
# What a head sees: another value is another input, so it is never swapped in silently.
VISIBLE = ("granularity", "pooling", "max_length")


def resolve_entry(*, cache: str | None = None, model: str | None = None, dataset: str | None = None,
                  cache_dir: str | None = None, extract_options: dict | None = None, log=print,
                  progress: bool = True) -> CacheEntry:
    """``extract_options``: more `ExtractConfig` fields (MLM: ``task``, ``block_size``, ...); the
    key fields among them must match exactly, the others may be relaxed (see the module's doc);
    ``progress``: a bar while an entry is extracted."""
    if cache:
        entry = open_entry(cache)
        entry.require_complete()  # a run killed between splits: never read as if it were whole
        return entry
    options = dict(extract_options or {})
    task = task_of(options)
    if model or dataset:  # no dataset: the task's default, as `extract` has it
        return _entry_for(model=model, dataset=dataset, cache_dir=cache_dir, options=options, log=log,
                          progress=progress)
    chosen = _chosen(cache_root(cache_dir), task, log)
    if chosen is None:
        return _entry_for(model=None, dataset=None, cache_dir=cache_dir, options=options, log=log, progress=progress)
    return open_entry(chosen)


def _chosen(root: str, task, log) -> str | None:
    """The complete entry of ``root`` a command takes when no --model/--dataset/--cache names one: None for
    the default model on the task's default data when that is there, else the only complete one; several,
    or none, are one line naming what to do."""
    from ..extract.models import DEFAULT_MODEL

    found = [e for e in list_entries(root, sizes=False) if e.fields["task"] == task.name]
    complete = [e for e in found if e.complete]
    if not complete:
        unfinished = first_few([f"{e.model} on {e.dataset}" for e in found])  # killed, or still being written
        raise LayerfuseError(f"no complete {task.name} cache entry under {root}; " + (
            f"rerun the `extract` that made {unfinished} to finish it" if found else
            f"run `extract{task.flag}` first") + " or pass --cache PATH")
    if any(e.model == DEFAULT_MODEL and e.dataset == task.default_dataset for e in complete):
        return None
    kind = _kind(complete, task)
    if len(complete) == 1:  # nothing to choose between
        log(f"using the only complete {kind}cache entry under {root}: {complete[0].model} on "
            f"{complete[0].dataset} ({complete[0].path})")
        return complete[0].path
    named = "" if kind else ", {} labels"  # entries of several primary sets: each named with its own
    listed = first_few([f"{e.model} on {e.dataset}{named.format(e.primary_labels)} [{options_label(e.fields)}"
                        f"{told_apart(e, complete)}]: --cache {e.path}" for e in complete],
                       rest=" (`layerfuse ls` lists them all)")
    raise LayerfuseError(f"which entry? {root} holds {len(complete)} complete {kind}entries, none of the "
                          f"default ({DEFAULT_MODEL} on {task.default_dataset}); name one with --model/--dataset or "
                          f"--cache PATH: {listed}")


def _kind(entries, task) -> str:
    """What ``entries`` are entries of, as a word before "entries" (with its space): the task's name for MLM,
    else their primary label set (``ner``, ``pos``, ...) when they share one; "" when they do not."""
    if not task.labels_from_data:
        return f"{task.name} "
    sets = {e.primary_labels for e in entries}
    return f"{sets.pop()} " if len(sets) == 1 else ""


def _entry_for(*, model: str | None, dataset: str | None, cache_dir: str | None, options: dict, log,
               progress: bool) -> CacheEntry:
    """The entry of ``model`` on ``dataset``, found or extracted, seen as this call reads them: the data as
    named and read now (its ``--columns``: an entry made of the same words, named or read otherwise, keeps the
    first name and reading, which run records and predict then used) and, for a folder of the user's, the
    backbone read from it (an entry made of a copy elsewhere records that copy's path)."""
    from ..extract.entry import former_note
    from ..extract.models import local_folder

    config, data, path, attrs = _described(model, dataset, cache_dir, options)
    note = former_note(path, attrs)
    if note and exists(path):  # said by extract when it is made (or resumed) now
        log(note)
    entry = _found_or_made(config, data, path, attrs, options=options, log=log, progress=progress)
    folder = local_folder(model)
    return entry.with_meta(dataset=attrs["dataset"], dataset_source=attrs["dataset_source"],
                           **({"model_path": folder} if folder else {}))


def _described(model: str | None, dataset: str | None, cache_dir: str | None, options: dict):
    """(`ExtractConfig`, data, entry path, entry attributes) of ``model`` on ``dataset``: the data and the
    model's config read, no weights loaded."""
    from ..extract.run import ExtractConfig, describe, load_data  # needs transformers

    config = ExtractConfig(model=model, dataset=dataset, cache_dir=cache_dir, **options)
    data = load_data(config, splits=list(config.splits) if config.splits else None)
    path, _, attrs = describe(config, dataset=data)
    return config, data, path, attrs


class PlannedEntry(MetaViews):
    """The entry `extract` would make, as its attributes describe it (no hidden state is there to read)."""

    def __init__(self, meta: dict):
        self.meta = meta


def planned_entry(*, cache: str | None, model: str | None, dataset: str | None, cache_dir: str | None,
                  options: dict, labels: str | None = None, log=print):
    """The entry --cache names, else the one --model and --dataset find, else the one `extract` would make of
    them (read off the model's config and the data, nothing extracted or written): what `train-head
    --dry-run` sizes the heads on."""
    if cache:
        return open_entry(cache).with_labels(labels)
    if not (model or dataset):  # a complete entry of the root, chosen as train-head chooses one: none is made
        chosen = _chosen(cache_root(cache_dir), task_of(options), log)
        if chosen is not None:
            return open_entry(chosen).with_labels(labels)
    _, data, path, attrs = _described(model, dataset, cache_dir, options)
    if exists(path):
        return open_entry(path).with_labels(labels)
    explicit = set(options) & set(KEY_FIELDS + OPTIONAL_KEY_FIELDS)  # the entry a run would use instead, as it says
    other = _made_otherwise(path, attrs, splits=data.splits, explicit=explicit, resuming=False, log=log)
    if other is not None:
        return open_entry(other).with_labels(labels)
    meta = dict(attrs)
    if labels and labels != (meta.get("primary_labels") or "ner"):  # a label set the data has beside the primary
        meta["label_names"] = list(data.column(labels).names)
    return PlannedEntry(meta)


def writable(path: str) -> bool:
    """Whether this process may write into the local entry ``path`` (a read-only mount, a colleague's root);
    a remote root is taken as writable: its store says otherwise when written."""
    return is_remote(path) or os.access(path, os.W_OK)


def _found_or_made(config, data, path: str, attrs: dict, *, options: dict, log, progress: bool) -> CacheEntry:
    from ..extract.run import extract, nothing_to_write
    opened = open_entry(path) if exists(path) else None
    if opened is not None and nothing_to_write(opened, config, data):
        return opened  # the usual case: the entry is there, finished, and read through this one open
    if opened is not None and not writable(opened.path) and nothing_to_write(opened, config, data, absent_sets=False):
        # a shared read-only root: the run reads what is stored; a set it needs and the entry lacks is said then
        log(f"note: {path}: the label sets of this data that the entry lacks are not stored (its root is "
            "read-only); a run on one of them says so")
        return opened
    exact = _status_and_close(opened)
    if exact is not None and exact.missing:
        log(f"{path} is incomplete: split(s) {', '.join(exact.missing)} not finished; extracting them")
    if exact is None or not exact.complete:
        other = _made_otherwise(path, attrs, splits=data.splits,
                                explicit=set(options) & set(KEY_FIELDS + OPTIONAL_KEY_FIELDS),
                                resuming=exact is not None, log=log)
        if other is not None:
            return open_entry(other)
    result = extract(config, progress=progress, log=log)
    if not all(s.reused for s in result.splits):
        log(f"extracted {result.path}")
    return open_entry(result.path)


def _status_and_close(opened: CacheEntry | None) -> EntryStatus | None:
    """The status of an entry that `extract` is about to write (read from the group already open), its
    read hold let go first: what is read after the write is opened anew."""
    if opened is None:
        return None
    opened.close()
    return entry_status(opened.path, size=False, group=opened.group)


def _made_otherwise(path: str, attrs: dict, *, splits, explicit: set, resuming: bool, log) -> str | None:
    """The newest complete entry that differs from ``attrs`` only in how it was made, or None when
    extracting is right; raises when the only entries there differ in what a head sees."""
    root = path.rsplit("/", 1)[0]
    candidates = [e for e in variants(root, attrs) if e.path != path and _covers(e, splits)
                  and not differences(attrs, e.fields, sorted(explicit))]
    relaxable = set(RELAXABLE) - explicit
    usable = [e for e in candidates if set(differences(attrs, e.fields)) <= relaxable]
    usable.sort(key=lambda e: len(differences(attrs, e.fields)))  # the same options first (a renamed folder)
    if usable:
        log(_using(usable, attrs))
        return usable[0].path
    if candidates and not resuming:
        raise LayerfuseError(_refusal(candidates, attrs))
    return None


def _covers(entry: EntryStatus, splits) -> bool:
    return entry.complete and set(splits) <= set(entry.splits)


def _using(usable: list[EntryStatus], attrs: dict) -> str:
    first = usable[0]
    diff = differences(attrs, first.fields)
    if not diff:  # a folder renamed, or copied in under another name: the same entry
        return (f"using the entry {first.path} made {first.finished}: it was made with these options (its folder "
                "is named otherwise)")
    made = ", ".join(f"{v}-forward" if n == "precision" else f"{v}-stored" for n, v in diff.items())
    defaults = ", ".join(f"{n} ({attrs[n]} by default)" for n in diff)
    newest = f" (the newest of {len(usable)} such)" if len(usable) > 1 else ""
    return (f"using the {made} entry {first.path} made {first.finished}{newest}: it differs from the "
            f"default options only in {defaults}, so it is not extracted again")


def _refusal(candidates: list[EntryStatus], attrs: dict) -> str:
    listed = first_few([f"{e.path} ({_options(differences(attrs, e.fields))})" for e in candidates],
                       rest=" (`layerfuse ls` lists them all)")
    wanted = _options({n: attrs[n] for n in VISIBLE})
    task = task_of(attrs).flag
    return (f"no entry of {attrs['model']} on {attrs['dataset']} with the default options ({wanted}), and the "
            f"ones there differ in what a head sees: {listed}. Pass --cache PATH for one of them, or run "
            f"`extract{task}` with the default options first")


def _options(values: dict) -> str:
    return ", ".join(f"{n} {v}" for n, v in values.items())
