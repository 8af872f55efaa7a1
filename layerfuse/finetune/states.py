"""A split whose hidden states the backbone computes per batch: sentences as words (`data.live_data`)
or MLM blocks as token ids (`mlm.live_blocks`). The words, tags, blocks and sentence ids come from the
cache entry, so the sample, the dev set and the evaluation are the very ones of FE."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import LayerfuseError
from ..training.arrays import IGNORE, Batch, Split


@dataclass(eq=False)
class LiveSplit(Split):
    """Sentences (``words``) or MLM blocks (``ids``, ``inputs``) of one split, with their labels;
    hidden states come from the backbone per batch, never kept (they change while it trains)."""

    name: str
    labels: np.ndarray  # [rows] int64: tag ids; MLM: the original token where predicted, IGNORE elsewhere
    offsets: np.ndarray  # [n + 1], sentence (block) i = rows offsets[i]:offsets[i + 1]
    layers: tuple[int, ...]
    sentence_ids: np.ndarray
    backbone: object = field(repr=False)
    words: list[list[str]] | None = None  # sentences: the words the backbone reads
    ids: np.ndarray | None = None  # MLM: [rows] int64, the original content tokens
    inputs: np.ndarray | None = None  # MLM: [rows] int64, what the backbone sees (masked)
    remask: tuple | None = None  # MLM train: (MaskVocab, probability), masks redrawn each epoch; None = fixed
    _memo: dict = field(default_factory=dict, repr=False)

    static = False  # hidden states change while the backbone trains: never cache eval batches

    @property
    def hidden(self):
        raise LayerfuseError("FT mode computes hidden states live; --layers auto:K and xie need a cache (use FE)")

    @property
    def row_bytes(self) -> int:
        return 0  # never kept: live batches are built per evaluation

    def select(self, positions) -> LiveSplit:
        positions = np.asarray(positions, dtype=np.int64)
        rows = self.rows_of(positions)
        offsets = np.concatenate([[0], np.cumsum(self.lengths[positions])]).astype(np.int64)
        return replace(self, labels=self.labels[rows], offsets=offsets, sentence_ids=self.sentence_ids[positions],
                       words=None if self.words is None else [self.words[p] for p in positions],
                       ids=None if self.ids is None else self.ids[rows],
                       inputs=None if self.inputs is None else self.inputs[rows], _memo={})

    def hold(self, positions) -> LiveSplit:
        """A run's sample: its own copy (a live split keeps no hidden states to hold)."""
        return self.select(positions)

    def take_layers(self, layers) -> LiveSplit:
        return replace(self, layers=tuple(int(x) for x in layers))  # the same memo: the same sentences

    def begin_epoch(self, epoch: int, *, seed: int) -> None:
        """MLM train: this epoch's masks over the held blocks (a run's own sample: `select` copied it)."""
        if self.remask is None:
            return
        from ..extract.masking import mask_tokens

        vocab, probability = self.remask
        self.inputs, self.labels = mask_tokens(self.ids, tokenizer_info=vocab, probability=probability,
                                               rng=np.random.default_rng([seed, epoch]))

    def batch(self, positions, *, device, packed: bool = False, multiple: int = 1) -> Batch:  # stays padded
        import torch

        positions = np.asarray(positions, dtype=np.int64)
        hidden, mask = self._encode(positions)  # [B, T, L, d], [B, T]
        labels = torch.full(mask.shape, IGNORE, dtype=torch.long)
        for b, p in enumerate(positions):
            row = self.labels[self.offsets[p]:self.offsets[p + 1]]
            labels[b, : len(row)] = torch.from_numpy(row)
        return Batch(hidden.to(device), mask.to(device), labels.to(device))

    def _encode(self, positions: np.ndarray):
        """The backbone's (hidden, mask) of the sentences or blocks at ``positions``."""
        if self.words is None:  # MLM blocks: their (masked) token ids, fed as extraction fed them
            blocks = [self.inputs[self.offsets[p]:self.offsets[p + 1]] for p in positions]
            return self.backbone.encode_ids(blocks, list(self.layers))
        from ..extract.tokenize import tokenize_words

        # The split is tokenized once (a run's sample: at its first batch), every batch a slice of it.
        tokens = self.cached("tokens", lambda: tokenize_words(self.backbone.tokenizer, self.words))
        return self.backbone(None, list(self.layers), tokens=tokens.select(positions))
