"""FT mode: the same heads on live hidden states of a backbone being fine-tuned end to end.

`LiveData` offers what `HeadData` offers (the words, tags and sentence ids come from the cache
entry, so the few-shot sample, the dev set and the evaluation are the very ones of FE), but a
batch runs the backbone on the batch's words instead of reading stored vectors, and
`trainable_backbone` hands `train_head` the backbone to train with the head.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import LayerfuseError
from ..tasks import task_of
from ..training.arrays import IGNORE, Batch
from ..training.data import RunData
from ..training.sampling import few_shot_sample
from .freeze import freeze
from .states import LiveStates


@dataclass(eq=False)
class LiveSplit(LiveStates):
    """Sentences of one split as words and tag ids; hidden states come from the backbone per batch."""

    name: str
    words: list[list[str]]
    labels: np.ndarray  # [rows] int64
    offsets: np.ndarray  # [n + 1]
    layers: tuple[int, ...]
    sentence_ids: np.ndarray
    backbone: object = field(repr=False)
    _memo: dict = field(default_factory=dict, repr=False)

    def select(self, positions) -> LiveSplit:
        positions = np.asarray(positions, dtype=np.int64)
        lengths = self.lengths[positions]
        rows = self.rows_of(positions)
        return LiveSplit(self.name, [self.words[p] for p in positions], self.labels[rows],
                         np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), self.layers,
                         self.sentence_ids[positions], self.backbone)

    def take_layers(self, layers) -> LiveSplit:
        return LiveSplit(self.name, self.words, self.labels, self.offsets, tuple(int(x) for x in layers),
                         self.sentence_ids, self.backbone, self._memo)

    def batch(self, positions, *, device, packed: bool = False, multiple: int = 1) -> Batch:  # stays padded
        import torch

        from ..extract.tokenize import tokenize_words

        positions = np.asarray(positions, dtype=np.int64)
        # The split is tokenized once (a run's sample: at its first batch), every batch a slice of it.
        tokens = self.cached("tokens", lambda: tokenize_words(self.backbone.tokenizer, self.words))
        hidden, mask = self.backbone(None, list(self.layers), tokens=tokens.select(positions))  # [B, T, L, d]
        labels = torch.full(mask.shape, IGNORE, dtype=torch.long)
        for b, p in enumerate(positions):
            row = self.labels[self.offsets[p]:self.offsets[p + 1]]
            labels[b, : len(row)] = torch.from_numpy(row)
        return Batch(hidden.to(device), mask.to(device), labels.to(device))


@dataclass(eq=False)
class LiveData(RunData):
    meta: dict
    path: str
    train: LiveSplit
    n_train_total: int
    dev: LiveSplit
    test: LiveSplit | None
    backbone: object  # the LiveBackbone: its parameters train with the head
    initial_state: dict = field(default_factory=dict, repr=False)
    lm: dict = field(default_factory=dict)  # MLM: the backbone's own MLM head (the cache's lm/*), the head's init

    def trainable_backbone(self, config):
        """The backbone, reset to its pretrained weights and frozen as ``config.freeze`` asks."""
        if config.mode != "ft":
            raise LayerfuseError("FE mode trains on cached hidden states; this data is live (use mode ft)")
        self.reset_backbone()
        freeze(self.backbone, config.freeze)
        return self.backbone

    def reset_backbone(self) -> None:
        """Every FT run starts from the pretrained weights, however many runs share this data."""
        if not self.initial_state:
            self.initial_state = {k: v.detach().clone() for k, v in self.backbone.state_dict().items()}
        else:
            self.backbone.load_state_dict(self.initial_state)
        for p in self.backbone.parameters():
            p.requires_grad_(True)

    def sample(self, *, shots: int | None, seed: int):
        ids = few_shot_sample(self.n_train_total, shots=shots, n_types=self.shot_size, seed=seed)
        return ids, self.train.select(ids)


def live_data(entry, backbone, *, layers) -> LiveData:
    """Words and tags of every split of a cache entry, around a live backbone (MLM entries: their
    blocks of token ids, `layerfuse.finetune.mlm`)."""
    for name in ("train", "dev"):
        if name not in entry.splits:
            raise LayerfuseError(f"{entry.path} has no finished {name!r} split; extract it first")
    n_train = entry.split("train").n_sentences
    if task_of(entry.meta).masks_inputs:
        from .mlm import live_blocks

        return LiveData(meta=dict(entry.meta), path=entry.path, n_train_total=n_train, backbone=backbone,
                        **live_blocks(entry, backbone, layers=layers))
    if entry.meta.get("granularity") != "word":
        raise LayerfuseError(f"FT mode needs a word-level cache; {entry.path} is {entry.meta.get('granularity')}")
    layers = tuple(int(x) for x in layers)

    def split(name):
        s = entry.split(name)
        return LiveSplit(name, s.words(), s.labels.astype(np.int64), s.offsets.astype(np.int64), layers,
                         np.arange(s.n_sentences), backbone)

    return LiveData(meta=dict(entry.meta), path=entry.path, train=split("train"), n_train_total=n_train,
                    dev=split("dev"),
                    test=split("test") if "test" in entry.splits else None, backbone=backbone)
