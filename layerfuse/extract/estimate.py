"""What `extract` would write, before anything is written: rows and bytes per split, the free space
of the cache root, and the time at a rate an earlier entry measured.

Everything comes from the dataset and the model's config (the tokenizer too where rows are
subwords; never the weights). `hidden` and `done` are sized by arithmetic on the shard layout
(whole inner chunks with a crc32c each, the shard index; the last shard stores only the inner
chunks that hold rows, padded to full size); the zstd-compressed small arrays (offsets, labels,
words) and the metadata are written by the writer's own code into memory and measured, so the
figure follows the writer instead of restating it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import numpy as np
import zarr
from zarr.storage import MemoryStore

from ..cache.codec import codec_of
from ..cache.layout import cache_root, is_remote, local_path, subgroups
from ..cache.manage import bytes_on_disk, list_entries
from ..cache.shard import shard_size
from ..cache.store import exists, open_group
from ..cache.writer import SplitPlan, _create_split, inner_chunk_rows, scale_chunk_rows
from ..errors import LayerfuseError
from ..tasks import DEFAULT_TASK
from .entry import default_unit_rows, describe, lm_complete, load_data, special_counts, wanted_label_sets

# What `SplitWriter.finish` adds to a split's zarr.json (run time, rate, counts, device, finish
# time): about 200 bytes measured; a fixed allowance, since the values are not known before the run.
FINISH_ATTRS_BYTES = 200


@dataclass
class SplitEstimate:
    split: str
    words: int
    rows: int
    bytes: int  # the split once written
    to_write: int  # what is still to write: 0 for a complete split, less what an unfinished one holds
    reused: bool


@dataclass
class Estimate:
    path: str  # the entry
    root: str  # the cache root
    layers: int  # L + 1
    width: int
    dtype: str
    granularity: str
    splits: list[SplitEstimate]
    entry_bytes: int  # entry-level data still to write: its metadata, and the MLM `lm` group
    free: int | None  # free bytes at the root; None where unknown (remote roots)
    rate: float | None = None  # words (MLM: tokens) per second measured by an earlier entry
    rate_source: str | None = None

    @property
    def total(self) -> int:
        return self.entry_bytes + sum(s.bytes for s in self.splits)

    @property
    def to_write(self) -> int:
        return self.entry_bytes + sum(s.to_write for s in self.splits)

    @property
    def words_to_write(self) -> int:
        return sum(s.words for s in self.splits if not s.reused)

    @property
    def seconds(self) -> float | None:
        return self.words_to_write / self.rate if self.rate else None

    @property
    def fits(self) -> bool | None:
        return None if self.free is None else self.to_write <= self.free


def free_space(root: str) -> int | None:
    """Free bytes of the file system that holds ``root`` (its nearest existing ancestor, as the
    root itself may not exist yet); None for a remote fsspec root."""
    if is_remote(root):
        return None
    path = os.path.abspath(os.path.expanduser(local_path(root)))
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free


def estimate(config, *, rate: bool = True) -> Estimate:
    """The dry run of ``extract(config)``: what it would write, the room it has, how long it takes.
    Loads no weights and writes nothing."""
    from .models import load_tokenizer, model_info

    dataset = load_data(config, splits=list(config.splits) if config.splits else None)
    wanted_label_sets(config, dataset)  # a --labels the data lacks: the same one line as the real run
    info = model_info(config.model, trust_remote_code=config.trust_remote_code, cache_dir=config.cache_dir)
    tokenizer = load_tokenizer(info, trust_remote_code=config.trust_remote_code) if _needs_tokenizer(config) else None
    path, _, attrs = describe(config, dataset=dataset, info=info, tokenizer=tokenizer)
    result = plan_estimate(config, dataset, info, path, attrs, list(dataset.splits), tokenizer=tokenizer)
    if rate:
        result.rate, result.rate_source = measured_rate(result.root, attrs)
    return result


def plan_estimate(config, dataset, info, path: str, attrs: dict, splits: list[str], *, tokenizer=None) -> Estimate:
    """The bytes of ``splits`` of the entry at ``path`` (complete ones reused), and the root's free space."""
    from .models import load_tokenizer

    if tokenizer is None and _needs_tokenizer(config):
        tokenizer = load_tokenizer(info, trust_remote_code=config.trust_remote_code)
    store: dict = {}  # the writer's metadata and small arrays, written here instead of to the root
    root = zarr.open_group(MemoryStore(store), mode="w")
    root.update_attributes(attrs)
    entry = 0 if exists(path) else _stored_bytes(store)
    if config.task_info.masks_inputs and not lm_complete(path):
        entry += _lm_bytes(info, attrs)
    out = []
    for split in splits:
        status = _split_status(path, split)
        where = path.rstrip("/") + "/" + split
        if status:  # complete: reused as it is
            a = open_group(where, mode="r").attrs
            out.append(SplitEstimate(split=split, words=a["n_words"], rows=a["n_rows"],
                                     bytes=bytes_on_disk(where) or 0, to_write=0, reused=True))
            continue
        plan = split_plan(config, dataset, split, info, tokenizer=tokenizer)
        before = _stored_bytes(store)
        _create_split(root, split, plan)
        done_flags = plan.n_units * (1 + 4)  # one bool per unit and its crc32c
        size = _stored_bytes(store) - before + FINISH_ATTRS_BYTES + hidden_bytes(plan) + done_flags
        held = (bytes_on_disk(where) or 0) if status is False else 0  # an unfinished split's units are kept
        out.append(SplitEstimate(split=split, words=len(plan.words), rows=plan.n_rows, bytes=size,
                                 to_write=max(0, size - held), reused=False))
    return Estimate(path=path, root=cache_root(config.cache_dir), layers=info.num_layers + 1, width=info.hidden_size,
                    dtype=config.dtype, granularity=config.granularity, splits=out, entry_bytes=entry,
                    free=free_space(cache_root(config.cache_dir)))


def check_free_space(config, dataset, info, path: str, attrs: dict, splits: list[str], *, tokenizer=None) -> None:
    """Refuse, before anything is written, a run whose remaining bytes exceed the root's free space."""
    est = plan_estimate(config, dataset, info, path, attrs, splits, tokenizer=tokenizer)
    if est.fits is False:
        raise LayerfuseError(
            f"extract needs about {_gib(est.to_write)} more at {est.root} but only {_gib(est.free)} is free; "
            f"free space or pass --cache-dir elsewhere (`extract --dry-run` shows the sizes)")


def split_plan(config, dataset, split: str, info, *, tokenizer=None) -> SplitPlan:
    """The `SplitPlan` extraction makes for ``split`` in every field that decides bytes (the plan id
    and token budget are stand-ins of the same size). Word rows need no tokenizer: every word,
    even one of zero subwords, gets a row."""
    n_layers, dim = info.num_layers + 1, info.hidden_size
    unit_rows = config.unit_rows or default_unit_rows(n_layers, dim, codec_of(config.dtype).value_bytes)
    arrays, word_index = {}, None
    if config.task_info.masks_inputs:
        from .masking import masked_split

        blocks = masked_split(tokenizer, dataset.splits[split], spec=config.masking, split=split,
                              source=dataset.source)
        offsets, labels = blocks.offsets, blocks.labels.astype(np.int32)
        words = tokenizer.convert_ids_to_tokens(blocks.inputs.tolist())
        arrays = {"input_ids": blocks.inputs.astype(np.int32)}
        word_index = blocks.tokenized().word_of_sub
    else:
        sentences = dataset.splits[split]
        label_index = {name: i for i, name in enumerate(dataset.label_names)}
        labels = np.array([label_index[t] for _, tags in sentences for t in tags], dtype=np.int16)
        words = [w for ws, _ in sentences for w in ws]
        offsets = np.concatenate([[0], np.cumsum([len(ws) for ws, _ in sentences])]).astype(np.int64)
        if config.granularity == "subword":
            from .masking import IGNORE
            from .tokenize import subword_rows, tokenize_words

            tok = tokenize_words(tokenizer, [ws for ws, _ in sentences])
            offsets, labels, word_index = subword_rows(tok, labels, special_counts(config, tokenizer), ignore=IGNORE)
    return SplitPlan(n_layers=n_layers, dim=dim, dtype=config.dtype, offsets=offsets, labels=labels, words=words,
                     unit_rows=unit_rows, plan_id="0" * 16, word_index=word_index,
                     attrs={"token_budget": config.token_budget or 4096, "unseen_in_train": 0}, arrays=arrays)


def hidden_bytes(plan: SplitPlan) -> int:
    """Bytes of the ``hidden`` shards: every full shard, then the last one with only its rows (scaled
    formats, int8: and the scales next to them)."""
    if plan.n_rows == 0:
        return 0
    codec = plan.codec
    size = lambda n: shard_size(n, (plan.n_layers, plan.dim), itemsize=codec.value_bytes,  # noqa: E731
                                shard_rows=plan.unit_rows, inner_rows=inner_chunk_rows(plan.unit_rows))
    full, last = divmod(plan.n_rows, plan.unit_rows)
    total = full * size(plan.unit_rows) + (size(last) if last else 0)
    if codec.scale_bytes:  # the scales: whole chunks (the last one padded), each with its crc32c
        total += plan.n_units * (scale_chunk_rows(plan) * plan.n_layers * codec.scale_bytes + 4)
    return total


def measured_rate(root: str, attrs: dict) -> tuple[float | None, str | None]:
    """Words (MLM: tokens) per second of the newest complete entry on ``root`` with the same model,
    forward precision and task, and where it was measured; (None, None) when there is none."""
    for entry in list_entries(root):  # newest first
        if not entry.complete:
            continue
        group = open_group(entry.path, mode="r")
        a = dict(group.attrs)
        if (a.get("model"), a.get("precision"), a.get("task", DEFAULT_TASK)) != (
                attrs["model"], attrs["precision"], attrs.get("task", DEFAULT_TASK)):
            continue
        words, seconds, devices = 0, 0.0, set()
        for _, g in subgroups(group):
            s = dict(g.attrs)
            if s.get("words_per_second"):
                words += s["n_words"]
                seconds += s["n_words"] / s["words_per_second"]  # a resumed split's rate covers its whole run
                devices.add(str(s.get("device", "?")))
        if words and seconds > 0:
            return words / seconds, f"{entry.path} ({', '.join(sorted(devices))}, finished {entry.finished})"
    return None, None


def _needs_tokenizer(config) -> bool:
    return config.task_info.masks_inputs or config.granularity == "subword"


def _stored_bytes(store: dict) -> int:
    return sum(len(v.to_bytes()) for v in store.values())


def _split_status(path: str, split: str) -> bool | None:
    """True: complete; False: started; None: not there."""
    if not exists(path):
        return None
    group = open_group(path, mode="r")
    return bool(group[split].attrs.get("complete")) if split in group else None


def _lm_bytes(info, attrs: dict) -> int:
    """The MLM entry's ``lm`` group, float32: the embeddings [vocab, d] and, with a checkpoint head,
    its dense layer, norm and decoder bias (checksums and metadata add well under 0.1%)."""
    vocab, d = attrs["vocab_size"], info.hidden_size
    values = vocab * d + (d * d + 3 * d + vocab if attrs.get("lm_head") == "checkpoint" else 0)
    return 4 * values


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
