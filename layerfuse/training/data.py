"""The hidden states a head trains on, read from the cache.

A run reads the train sentences it needs (a few-shot sample, a union of samples for a sweep, or the
whole split) with the layers it needs, and dev (and test) with only the fused layers. A part whose
fused layers fit the device's memory budget (`budget.memory_budget`) is read once and held in the
process's activation store (`store`; storage dtype, a batch widened on the fly); a larger one is
streamed, read block by block whenever it is used (an `arrays.SplitArrays` either way). A sweep
builds one `HeadData` and calls `train_head` on it many times: the sample of a run is then picked
from memory by index (or read alone, when train streams).

Layer ids are the cache's (0 = embedding output, 1..L = the transformer layers, as in the paper).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..cache.reader import MetaViews, id_array
from ..errors import LayerfuseError, removed_names
from ..layers import LayerSpec, parse_layers, rank_layers
from ..seeds import SEED_LIMIT, is_seed
from ..tasks import task_of
from .arrays import IGNORE, Split, SplitArrays, load_split  # noqa: F401 - SplitArrays is imported from here too
from .sampling import entity_types, few_shot_sample, shot_size

# The arrays' own names live in `arrays`.
__getattr__ = removed_names(__name__, {"Batch": "layerfuse.training.arrays.Batch",
                                       "Sentences": "layerfuse.training.arrays.Split",
                                       "sentence_rows": "layerfuse.training.arrays.sentence_rows",
                                       "EntryViews": "layerfuse.training.data.HeadData"})

# ----------------------------------------------------------------------------------------------
# Everything a run needs


@dataclass(eq=False)
class HeadData(MetaViews):
    """What `train_head` trains on: the entry's metadata and path, the train sentences (some or all)
    and the dev and test splits, and MLM's head init (the cache's ``lm`` arrays). The splits are the
    cache's hidden states, held or streamed (`load_data`, `load_for_run`), or a live backbone's, computed
    per batch, with ``backbone`` the one that trains with the head (FT: `layerfuse.finetune.data.live_data`)."""

    meta: dict  # the cache entry's attributes (model, key, hidden_size, num_layers, label_names, ...)
    path: str  # the cache entry
    train: Split  # the train sentences held, streamed or live, in cache id order
    n_train_total: int  # sentences in the cache's train split: what samples are drawn from
    dev: Split
    test: Split | None = None
    lm: dict = field(default_factory=dict)  # MLM: the lm/* arrays (embeddings [vocab, d], the head's init)
    backbone: object = field(default=None, repr=False)  # FT: the live backbone; None: cached hidden states

    def __repr__(self) -> str:  # the dataclass's printed every array: 350 lines in a notebook cell
        splits = ", ".join(f"{name}: {split.n_sentences} sentences, layers {list(split.layers)}"
                           for name, split in (("train", self.train), ("dev", self.dev), ("test", self.test))
                           if split is not None)
        return f"HeadData({self.path!r}; {splits}{'; live backbone' if self.backbone is not None else ''})"

    @property
    def entity_types(self) -> list[str]:
        return entity_types(self.meta)

    @property
    def shot_size(self) -> int:
        return shot_size(self.meta)

    def trainable_backbone(self, config):
        """The backbone that trains with the head (FT), at its pretrained weights and frozen as
        ``config.freeze`` asks (every run starts from the same weights); None for cached states (FE)."""
        if self.backbone is None:
            if config.mode != "fe":
                raise LayerfuseError("FT mode needs the backbone: build the data with layerfuse.finetune.live_data")
            return None
        if config.mode != "ft":
            raise LayerfuseError("FE mode trains on cached hidden states; this data is live (use mode ft)")
        return self.backbone.for_run(config.freeze)

    def sample(self, *, shots: int | None, seed: int) -> tuple[np.ndarray, Split]:
        """(cache ids, train sentences) of the seeded few-shot sample, picked from what train holds;
        from a streamed train, the sample alone is read and held (all of train stays streamed)."""
        ids = few_shot_sample(self.n_train_total, shots=shots, n_types=self.shot_size, seed=seed)
        held = self.train.sentence_ids  # sorted
        positions = np.searchsorted(held, ids)
        ok = positions < len(held)
        ok[ok] = held[positions[ok]] == ids[ok]
        if not ok.all():
            raise LayerfuseError(
                f"the sample for shots={shots}, seed={seed} needs {int((~ok).sum())} train sentences that were "
                f"not loaded (e.g. id {int(ids[~ok][0])}); load the data for this run: load_for_run(entry, "
                f"layers=..., shots={shots}, seed={seed}) (or load_data with train_sentences=None)"
            )
        return ids, self.train.hold(positions)


def choose_layers(spec: LayerSpec, train: Split, *, seed: int):
    """(fused layers, nu scores or None): auto:K and xie:K rank the candidates by nu on ``train`` (the
    run's own sample), with the tags as token classes and at most 2000 tokens per tag (seeded)."""
    if spec.k is None:
        return spec.candidates, None
    labels = train.labels
    classes = np.unique(labels[labels != IGNORE])
    if len(classes) < 2:
        raise LayerfuseError(
            f"--layers {spec.rule}:{spec.k} needs at least 2 tags in the training sample to score layers, but its "
            f"{train.n_sentences} sentences have only {len(classes)}; pass --layers explicitly or use more shots"
        )
    train = train.select(np.argsort(train.sentence_ids, kind="stable"))  # order-free: same pick however drawn
    missing = [x for x in spec.candidates if x not in train.layers]
    if missing:
        raise LayerfuseError(f"{spec.rule}:{spec.k} ranks layers {list(spec.candidates)}, but layers {missing} of the "
                              f"train sentences are not loaded (held: {list(train.layers)})")
    scores = rank_layers(train.layer, train.labels,  # one [rows, d] layer at a time
                         layer_ids=list(spec.candidates), seed=seed, ignore_label=IGNORE)
    return spec.fused(scores), scores


def load_data(entry, *, layers: Sequence[int] | None = None, eval_layers: Sequence[int] | None = None,
              train_sentences: Sequence[int] | None = None) -> HeadData:
    """Read a `CacheEntry` once: ``train_sentences`` (None = all) of train with ``layers`` (None =
    1..L), and all of dev (and test, if cached) with ``eval_layers`` (None = ``layers``); each part
    larger than the memory budget streams instead (`store.open_split`).

    A sweep loads all of train (or the union of its samples) once and runs `train_head` on it."""
    L = opened_entry(entry, "load_data").num_layers
    # ids as the reader takes them (`id_array`): a float or a string's digits were read as other ids
    layers = tuple(range(1, L + 1)) if layers is None else tuple(id_array(layers, what="layers").tolist())
    eval_layers = layers if eval_layers is None else tuple(id_array(eval_layers, what="eval_layers").tolist())
    for name, chosen in (("layers", layers), ("eval_layers", eval_layers)):
        bad = [x for x in chosen if not 0 <= x <= L]
        if bad or not chosen:
            raise LayerfuseError(f"{name} {list(chosen)} out of range: {entry.path} has layers 0..{L}")
    _require_splits(entry)
    train_split = entry.split("train")
    if train_sentences is not None:
        train_sentences = np.unique(id_array(train_sentences, what="train_sentences"))  # sorted, for lookups
        outside = train_sentences[(train_sentences < 0) | (train_sentences >= train_split.n_sentences)]
        if outside.size:
            raise LayerfuseError(f"train_sentences {outside[:5].tolist()} out of range: train of {entry.path} has "
                                 f"sentences 0..{train_split.n_sentences - 1}")
    train = _open_split(train_split, sentences=train_sentences, layers=layers)
    return _assemble(entry, train, eval_layers)


def load_for_run(entry, *, layers: str | None, shots: int | None, seed: int,
                 query_layers: Sequence[int] = ()) -> HeadData:
    """Exactly what one run needs: its sample of train with the candidate layers (all of 1..L for
    auto:K, to rank them), and dev/test with only the fused layers; each with ``query_layers`` too
    (the top layer a run reads as z_L: `TrainConfig.query_layers`)."""
    spec = parse_layers(layers, num_layers=opened_entry(entry, "load_for_run").num_layers)
    if not is_seed(seed):
        raise LayerfuseError(f"seed {seed!r} is not an integer in 0..{SEED_LIMIT - 1}")
    _require_splits(entry)
    train_split = entry.split("train")
    ids = None
    if shots is not None:
        ids = few_shot_sample(train_split.n_sentences, shots=shots, n_types=shot_size(entry.meta), seed=seed)
        ids = np.sort(ids)
    # A few-shot sample is always held; all of train streams when it exceeds the budget.
    train = (load_split if ids is not None else _open_split)(train_split, sentences=ids,
                                                              layers=_with(spec.candidates, query_layers))
    fused, _ = choose_layers(spec, train, seed=seed)
    return _assemble(entry, train, _with(fused, query_layers))


def _with(layers: Sequence[int], more: Sequence[int]) -> tuple[int, ...]:
    """``layers`` and ``more``, each once, in order."""
    return tuple(sorted({*map(int, layers), *map(int, more)}))


def opened_entry(entry, what: str):
    """``entry`` if it is an opened entry (`open_entry`); a path is refused in one line, not an
    AttributeError of a ``str``."""
    if not hasattr(entry, "split") or isinstance(entry, (str, bytes)):
        raise LayerfuseError(f"{what} takes an opened entry (layerfuse.open_entry(PATH)), got {entry!r:.80}")
    return entry


def _require_splits(entry) -> None:
    for split in ("train", "dev"):
        if split not in entry.splits:
            raise LayerfuseError(f"{entry.path} has no finished {split!r} split (it has {entry.splits}); extract "
                                  f"it first (a dataset without a {split} file: add one, then extract again)")


def _open_split(split, *, sentences, layers: Sequence[int]) -> Split:
    from .store import open_split  # the store builds on this module's classes

    return open_split(split, sentences=sentences, layers=layers)


def _assemble(entry, train: Split, eval_layers: Sequence[int]) -> HeadData:
    """A `HeadData` around an already-read train part: dev and test with ``eval_layers`` only (each split
    opened once: the entry keeps what it opened)."""
    eval_layers = tuple(int(x) for x in eval_layers)
    test = _open_split(entry.split("test"), sentences=None, layers=eval_layers) if "test" in entry.splits else None
    return HeadData(meta=dict(entry.meta), path=entry.path, train=train,
                    n_train_total=entry.split("train").n_sentences,
                    dev=_open_split(entry.split("dev"), sentences=None, layers=eval_layers), test=test,
                    lm=lm_arrays(entry))


def lm_arrays(entry) -> dict:
    """An MLM entry's ``lm/*`` arrays by name (``embeddings`` [vocab, d] float32, and the backbone's
    own MLM head when it has one); {} for NER entries."""
    return entry.lm() if task_of(entry.meta).masks_inputs else {}
