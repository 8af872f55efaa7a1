"""FT mode for masked language modelling: the blocks of an MLM cache entry around a live backbone.

The entry already holds every block as token ids: the original token is the label where one was
chosen for prediction and the stored input elsewhere, so no corpus is re-read or re-tokenized.
Dev and test keep the entry's fixed masks (`masked_split`'s, the ones FE scores), so FE and FT
perplexities are measured on the very same positions; train draws fresh masks every epoch from
``np.random.default_rng([seed, epoch])``, as pretraining does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import LayerfuseError
from ..training.arrays import IGNORE, Batch
from .states import LiveStates


@dataclass(eq=False)
class LiveBlocks(LiveStates):
    """Blocks of one split as token ids; hidden states come from the backbone per batch."""

    name: str
    ids: np.ndarray  # [rows] int64, the original content tokens
    inputs: np.ndarray  # [rows] int64, what the backbone sees (masked)
    labels: np.ndarray  # [rows] int64, the original token where predicted, IGNORE elsewhere
    offsets: np.ndarray  # [n + 1], block i = rows offsets[i]:offsets[i + 1]
    layers: tuple[int, ...]
    sentence_ids: np.ndarray
    backbone: object = field(repr=False)
    remask: tuple | None = None  # train: (MaskVocab, probability), masks redrawn each epoch; None = fixed
    _memo: dict = field(default_factory=dict, repr=False)

    def select(self, positions) -> LiveBlocks:
        positions = np.asarray(positions, dtype=np.int64)
        rows = self.rows_of(positions)
        offsets = np.concatenate([[0], np.cumsum(self.lengths[positions])]).astype(np.int64)
        return LiveBlocks(self.name, self.ids[rows], self.inputs[rows], self.labels[rows], offsets, self.layers,
                          self.sentence_ids[positions], self.backbone, self.remask)

    def take_layers(self, layers) -> LiveBlocks:
        return LiveBlocks(self.name, self.ids, self.inputs, self.labels, self.offsets, tuple(int(x) for x in layers),
                          self.sentence_ids, self.backbone, self.remask, self._memo)

    def begin_epoch(self, epoch: int, *, seed: int) -> None:
        """Train: this epoch's masks over the held blocks (a run's own sample: `select` copied it)."""
        if self.remask is None:
            return
        from ..extract.masking import mask_tokens

        vocab, probability = self.remask
        self.inputs, self.labels = mask_tokens(self.ids, tokenizer_info=vocab, probability=probability,
                                               rng=np.random.default_rng([seed, epoch]))

    def batch(self, positions, *, device, packed: bool = False, multiple: int = 1) -> Batch:  # stays padded
        import torch

        positions = np.asarray(positions, dtype=np.int64)
        blocks = [self.inputs[self.offsets[p]:self.offsets[p + 1]] for p in positions]
        hidden, mask = self.backbone.encode_ids(blocks, list(self.layers))  # [B, T, L, d], [B, T]
        labels = torch.full(mask.shape, IGNORE, dtype=torch.long)
        for b, p in enumerate(positions):
            row = self.labels[self.offsets[p]:self.offsets[p + 1]]
            labels[b, : len(row)] = torch.from_numpy(row)
        return Batch(hidden.to(device), mask.to(device), labels.to(device))


def live_blocks(entry, backbone, *, layers) -> dict:
    """The `LiveData` fields of an MLM entry: its splits as `LiveBlocks`, and its lm/* head init."""
    from ..extract.masking import MaskVocab

    vocab = MaskVocab.of(backbone.tokenizer)
    if vocab.mask_id != int(entry.meta["mask_token_id"]):
        raise LayerfuseError(f"the backbone's mask token id {vocab.mask_id} is not the cache's "
                              f"{entry.meta['mask_token_id']} ({entry.path})")
    layers = tuple(int(x) for x in layers)

    def split(name, remask):
        s = entry.split(name)
        inputs, labels = s.input_ids, s.labels.astype(np.int64)  # [rows]
        ids = np.where(labels != IGNORE, labels, inputs)  # the original blocks
        return LiveBlocks(name, ids, inputs, labels, s.offsets.astype(np.int64), layers, np.arange(s.n_sentences),
                          backbone, remask)

    probability = float(entry.meta["mlm_probability"])
    lm = {k: v for k, v in entry.lm().items() if k != "embeddings"}  # FT decodes with the backbone's own
    return dict(train=split("train", (vocab, probability)), dev=split("dev", None),
                test=split("test", None) if "test" in entry.splits else None, lm=lm)
