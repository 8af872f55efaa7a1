"""`extract`: run the frozen backbone once over a dataset and write every layer into the cache.

Each split is planned up front (tokenized, rows counted), then encoded unit by unit; a unit is a
fixed range of rows (one zarr shard), encoded from the sentences that overlap it, length-sorted
within the unit. A background thread writes finished units while the next one is encoded.
Because a unit's batches depend only on the plan, a resumed run recomputes exactly the same bytes.

Masked language modelling (``task="mlm"``) goes through the same machinery: a raw-text corpus is cut
into blocks and masked once (masking.py), each block is a "sentence" whose subwords are its words,
so rows are the content tokens of the masked input; the labels are the original ids of the tokens
chosen for prediction, and the entry also keeps the input ids and the backbone's LM weights (``lm``).
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..cache import label_sets
from ..cache.layout import checked_root
from ..cache.lock import EntryLock
from ..cache.store import exists, open_group
from ..cache.writer import remove_partials, write_entry_arrays
from ..errors import LayerfuseError, removed_names
from .distributed import Ranks
from .entry import (
    ExtractConfig,
    describe,
    former_note,
    lm_complete,
    lm_finished,
    load_data,
    split_complete,
    split_finished,
    wanted_label_sets,
)
from .estimate import check_free_space
from .job import Extraction, SplitJob, SplitSummary, summary_from_cache
from .masking import IGNORE
from .models import ModelInfo, load_model, load_tokenizer, model_info

# The options and the entry's description moved to `entry` (the dry run reads them too).
__getattr__ = removed_names(__name__, {
    **{name: f"layerfuse.extract.entry.{name}" for name in (
        "DTYPE_BYTES", "DTYPES", "GRANULARITIES", "MASKING_FORMAT", "POOLINGS", "default_token_budget",
        "default_unit_rows", "special_counts")},
    "_BackgroundWriter": "layerfuse.extract.job.BackgroundWriter",
})


@dataclass
class ExtractResult:
    path: str
    key: str
    splits: list[SplitSummary] = field(default_factory=list)
    label_sets: list[str] = field(default_factory=list)  # the label sets this run wrote (beside the primary)


def _lm_arrays(info: ModelInfo, model, attrs: dict) -> dict[str, np.ndarray]:
    """The tied decoder (the input embeddings, as loaded) and the checkpoint's head when it has one."""
    from .lm_weights import lm_head_weights

    arrays = {"embeddings": model.get_input_embeddings().weight.detach().float().cpu().numpy()}
    if attrs["lm_head"] == "checkpoint":
        arrays.update(lm_head_weights(info, embeddings=False))
    return arrays


def extract(config: ExtractConfig, *, progress: bool = True, log=print, on_unit=None) -> ExtractResult:
    """Stage one, as `extract` on the command line: run ``config.model`` once over ``config.dataset`` and
    write every layer's hidden states into the cache entry those options key (resumed where a run
    stopped; an entry already complete is found, not made again). Returns an `ExtractResult`: the
    entry's ``path`` (for `open_entry`) and ``key``.

    ``progress``: a progress bar per split; ``log``: where the summary lines go (``print``; a function
    of one string). ``on_unit(split, rows_done, rows_total)``: called as each split starts (rows already
    cached) and after each unit is encoded, for a caller that reports progress its own way; an exception
    it raises stops the run between units, the units handed to the writer still written.

    Example:
        ```python
        from layerfuse.extract.run import ExtractConfig, extract

        path = extract(ExtractConfig(model="all-MiniLM-L6-v2", dataset="PATH/conll2003"), progress=False).path
        ```
    """
    ranks = Ranks()
    if not ranks.main:
        progress, log, on_unit = False, (lambda message: None), None
    mlm = config.task_info.masks_inputs
    dataset = load_data(config, splits=list(config.splits) if config.splits else None)
    info = model_info(config.model, trust_remote_code=config.trust_remote_code, cache_dir=config.cache_dir)
    tokenizer = load_tokenizer(info, trust_remote_code=config.trust_remote_code) if mlm else None
    path, key, attrs = describe(config, dataset=dataset, info=info, tokenizer=tokenizer)
    result = ExtractResult(path=path, key=key)
    note = former_note(path, attrs)
    if note:
        log(note)
    cached = open_group(path, mode="r") if exists(path) else None  # what is there already, read once
    wanted = wanted_label_sets(config, dataset, None if cached is None else dict(cached.attrs))
    todo = [s for s in dataset.splits if not split_finished(cached, s)]
    if len(todo) < len(dataset.splits):
        _refuse_damaged(path)
    result.splits += [summary_from_cache(path, s, reused=True, group=cached) for s in dataset.splits if s not in todo]
    if not todo and not (mlm and not lm_finished(cached)):
        result.label_sets = _label_sets_only(config, path, cached, dataset, wanted, main=ranks.main, log=log)
        return result
    if getattr(dataset, "passed_over", None):  # said once, when something is written: a README is no news on reuse
        log(f"{config.dataset}: files not read, no split being named so: {', '.join(dataset.passed_over)}")
    _check_writable_root(config, path)  # found: nothing to write was no reason to refuse a read-only root
    # Files a killed or failed run left half-written hold space this run needs: gone before it is counted.
    remove_partials(path, todo)
    # Before the lock file or the entry exists: a run that cannot fit writes nothing at all.
    check_free_space(config, dataset, info, path, attrs, todo, tokenizer=tokenizer)
    run = Extraction(config=config, dataset=dataset, info=info, tokenizer=tokenizer, path=path, attrs=attrs,
                     ranks=ranks, progress=progress, log=log, on_unit=on_unit)
    with EntryLock(path, log=log) if ranks.main else contextlib.nullcontext():
        if ranks.main:  # a writer this run waited on and that was killed left its half-written shards
            remove_partials(path, todo)
        ranks.barrier()  # the other ranks start once rank 0 holds the entry
        _start_backbone(run)
        result.splits += _extract_splits(run, todo)
        if wanted and ranks.main:
            result.label_sets = write_label_sets(path, dataset, wanted, log=log)
    order = list(dataset.splits)
    result.splits.sort(key=lambda s: order.index(s.split))
    return result


def _label_sets_only(config: ExtractConfig, path: str, cached, dataset, wanted: list[str], *, main: bool,
                     log) -> list[str]:
    """Every split is cached: new label sets are labels only, no forward pass; none to write, no lock taken
    (a colleague who may not write the entry's lock reads a complete entry all the same). The names written."""
    if not (main and stale_label_sets(cached, dataset, wanted)):
        return []
    _check_writable_root(config, path)
    with EntryLock(path, log=log):
        return write_label_sets(path, dataset, wanted, log=log)


def _check_writable_root(config: ExtractConfig, path: str) -> None:
    """One line naming the cache root when it is read-only and ``path`` (an entry under it) is to be written."""
    checked_root(config.cache_dir, write=True, writes=f"extract writes {path.rstrip('/').rsplit('/', 1)[-1]} there")


def _refuse_damaged(path: str) -> None:
    """A finished split is reused as it is: one whose files are gone or whose metadata changed (what `ls`
    checks, a stat per file) made `extract` say "already cached" while every reader said "re-extract".
    Local entries only: on an object store the check is a request per file."""
    from ..cache.layout import is_remote
    from ..cache.manage import quick_check
    from ..cache.manifest import REPAIR

    problems = [] if is_remote(path) else quick_check(path)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        first = problems[0].removesuffix(f"; {REPAIR}")
        raise LayerfuseError(f"{first}{more}: extract would reuse the damaged split; {REPAIR}")


def _start_backbone(run: Extraction) -> None:
    """The run's device and tokenizer, and its model loading in a thread: the model loads (mostly
    importing its modeling code: a second or more) while the first split is tokenized and planned;
    `model.result()` waits for it, or raises its error. MLM: the entry's ``lm`` arrays once it loads."""
    config = run.config
    run.device = run.ranks.device(config.device)
    run.tokenizer = run.tokenizer or load_tokenizer(run.info, trust_remote_code=config.trust_remote_code)
    loader = ThreadPoolExecutor(1, thread_name_prefix="layerfuse-model")
    run.model = loader.submit(load_model, run.info, device=run.device, trust_remote_code=config.trust_remote_code)
    loader.shutdown(wait=False)
    if config.task_info.masks_inputs and run.ranks.main and not lm_complete(run.path):
        write_entry_arrays(run.path, run.attrs, "lm", _lm_arrays(run.info, run.model.result(), run.attrs))


def _extract_splits(run: Extraction, splits: list[str]) -> list[SplitSummary]:
    """Each split of ``splits`` extracted as a `SplitJob`, or reused where another process finished it
    while this one waited for the entry."""
    summaries = []
    for split in splits:
        done = split_complete(run.path, split)
        run.ranks.barrier()
        if done:
            summaries.append(summary_from_cache(run.path, split, reused=True))
        else:
            summaries.append(SplitJob.tokenized(run, split).execute())
    return summaries


def nothing_to_write(entry, config: ExtractConfig, dataset, *, absent_sets: bool = True) -> bool:
    """Whether `extract` would write nothing into the opened ``entry`` (a `CacheEntry`): every split of
    ``dataset`` finished (an MLM entry's ``lm`` group too) and every wanted label set stored with this
    content. A caller that holds the entry open then uses it as it is, without reopening it. Without
    ``absent_sets``, a wanted set the entry lists under no version does not count (one listed with other
    content still does: its runs would read stale labels)."""
    if not set(dataset.splits) <= set(entry.splits):
        return False
    if config.task_info.masks_inputs and not lm_finished(entry.group):
        return False
    listed = label_sets.listed(entry.stored_meta)
    return all(label_sets.is_current(entry.stored_meta, name,
                                     fingerprints=dataset.label_fingerprints(name, splits=entry.splits))
               for name in wanted_label_sets(config, dataset, entry.stored_meta) if absent_sets or name in listed)


def write_label_sets(path: str, dataset, names: list[str], *, log=print) -> list[str]:
    """Store each label set of ``names`` that the entry lacks or holds with other content, over every
    split of the entry that the dataset's files hold (those of ``dataset`` are all cached by now; one
    cached by an earlier run is labelled again too, so a set never covers fewer splits because this run
    read some: `--splits train` after a tag changed in dev relabels dev); returns the names written.
    Labels only: the hidden states are not read, nor the model loaded."""
    group = open_group(path, mode="r")  # read under the entry's lock: another run may have just written a set
    written = []
    for name in stale_label_sets(group, dataset, names):
        column = dataset.column(name)
        splits = [split for split in column.tags if split_finished(group, split)]
        fingerprints = dataset.label_fingerprints(name, splits=splits)
        index = {label: i for i, label in enumerate(column.names)}
        ids = {split: _row_labels(group[split], [np.array([index[t] for t in tags], dtype=np.int16)
                                                 for tags in column.tags[split]]) for split in splits}
        label_sets.write_label_set(path, name, kind=column.kind, names=column.names, fingerprints=fingerprints,
                                   labels=ids, origin=(dataset.name, dataset.source))
        log(f"label set {name!r} ({column.kind}, {len(column.names)} labels) stored for {', '.join(splits)}")
        written.append(name)
    return written


def stale_label_sets(group, dataset, names: list[str]) -> list[str]:
    """The label sets of ``names`` that the entry ``group`` lacks or holds with other content than ``dataset``'s
    (what `write_label_sets` writes)."""
    meta = dict(group.attrs)
    stale = []
    for name in names:
        splits = [split for split in dataset.column(name).tags if split_finished(group, split)]
        stored = label_sets.array_name(meta, name) if name in (meta.get(label_sets.LISTING) or {}) else None
        # a split written again since (its array folder was gone) holds no array of the set listed as current
        if not (label_sets.is_current(meta, name, fingerprints=dataset.label_fingerprints(name, splits=splits))
                and all(stored in group[s] for s in splits)):
            stale.append(name)
    return stale


def _row_labels(split_group, sentence_labels: list[np.ndarray]) -> np.ndarray:
    """[rows] labels of a cached split from per-sentence word labels: a word row takes its word's label;
    a subword row its word's (as the primary ``labels`` do), a special token's row IGNORE."""
    flat = np.concatenate(sentence_labels) if sentence_labels else np.zeros(0, dtype=np.int16)
    if "word_index" not in split_group:
        if len(flat) != int(split_group.attrs["n_rows"]):
            raise LayerfuseError(f"{len(flat)} labels for the {split_group.attrs['n_rows']} rows of a split")
        return flat
    offsets = split_group["offsets"][:]
    word_index = split_group["word_index"][:].astype(np.int64)
    first_word = np.cumsum([0] + [len(x) for x in sentence_labels])[:-1]  # [sentences]
    sentence_of_row = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    out = np.full(len(word_index), IGNORE, dtype=np.int16)
    real = word_index >= 0
    out[real] = flat[first_word[sentence_of_row[real]] + word_index[real]]
    return out
