"""Splits too large for the memory budget, read from the cache a block at a time.

A `StreamedSplit` holds what is small (offsets, labels, sentence ids: a few bytes per row) and reads
the hidden states of one block of ``budget.BLOCK_ROWS`` cache rows when a batch needs it, each
layer as a slice (`CacheSplit.hidden`). It keeps at most ``2 * SHUFFLE_WINDOW`` blocks: what one
training step can span; evaluation keeps one. Its batches are built from the same rows by the same
code as a held split's (`SplitArrays.batch`), so they are equal bit for bit.

Evaluation order is the same held or streamed (`Sentences.eval_groups`). Training differs: a held
split draws a permutation of all its sentences each epoch; a streamed one reads its blocks in a
seeded random order and shuffles sentences within each window of ``SHUFFLE_WINDOW`` blocks
(`StreamedSplit.epoch_order`), a different order, as deterministic for a seed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import budget
from .arrays import Batch, Sentences, SplitArrays, load_split, stored_tensor

_READER = []  # one thread per process reads the next block while the current one computes


def _reader():
    """The read-ahead thread (zarr's reads and decompression release the GIL)."""
    if not _READER:
        from concurrent.futures import ThreadPoolExecutor

        _READER.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="layerfuse-read-ahead"))
    return _READER[0]


@dataclass(eq=False)
class StreamedSplit(Sentences):
    """Some sentences of one cached split (sorted by cache id), some layers, read block by block."""

    name: str
    source: object  # the CacheSplit read from
    labels: np.ndarray  # [rows] int64 of the sentences, back to back; IGNORE where no loss
    offsets: np.ndarray  # [n + 1] int64, sentence i = rows offsets[i]:offsets[i + 1] of labels
    layers: tuple[int, ...]
    sentence_ids: np.ndarray  # [n] cache sentence ids
    starts: np.ndarray  # [n] cache row of each sentence's first row: its block is starts // BLOCK_ROWS
    _memo: dict = field(default_factory=dict, repr=False)
    _blocks: OrderedDict = field(default_factory=OrderedDict, repr=False)  # block key -> (positions, SplitArrays)
    _pending: dict = field(default_factory=dict, repr=False)  # block key -> Future of `_read_block`, read ahead
    _last_view: tuple = field(default=(), repr=False)
    _device: object = field(default=None, repr=False)  # where the last batch went: blocks read ahead go there

    streamed = True

    @property
    def row_bytes(self) -> int:
        return len(self.layers) * self.source.dim * 4

    def select(self, positions) -> StreamedSplit:
        """The sentences at ``positions``, still streamed (nothing is read)."""
        positions = np.asarray(positions, dtype=np.int64)
        if np.array_equal(positions, np.arange(self.n_sentences)):
            return self
        offsets = np.concatenate([[0], np.cumsum(self.lengths[positions])]).astype(np.int64)
        return StreamedSplit(self.name, self.source, self.labels[self.rows_of(positions)], offsets, self.layers,
                             self.sentence_ids[positions], self.starts[positions])

    def hold(self, positions) -> SplitArrays:
        """The sentences at ``positions``, in that order, read from the cache and held (a sample)."""
        positions = np.asarray(positions, dtype=np.int64)
        ids = self.sentence_ids[positions]
        by_id = np.argsort(ids, kind="stable")
        held = load_split(self.source, sentences=ids[by_id], layers=self.layers)  # one read, in cache order
        return held.select(np.argsort(by_id, kind="stable"))

    def take_layers(self, layers: Sequence[int]) -> StreamedSplit:
        """Only the given cache layers (of those this split was opened with), in the order given."""
        return self._layer_view(layers, lambda layers: StreamedSplit(
            self.name, self.source, self.labels, self.offsets, layers, self.sentence_ids, self.starts,
            _memo=self._memo))  # same sentences: gold entities and the like carry over

    def layer(self, layer: int) -> np.ndarray:
        """[rows, d] of one cache layer over these sentences: one slice read (auto:K ranks with it)."""
        whole = len(self.sentence_ids) == self.source.n_sentences and np.array_equal(
            self.sentence_ids, np.arange(self.source.n_sentences))
        return self.source.hidden(sentences=None if whole else self.sentence_ids, layers=[layer])[:, 0]

    def batch(self, positions, *, device, packed: bool = False, multiple: int = 1) -> Batch:
        """As `SplitArrays.batch`, from the blocks that hold ``positions`` (read when not kept)."""
        positions = np.asarray(positions, dtype=np.int64)
        self._device = device
        keys = self._keys()[positions]
        if len(keys) and (keys == keys[0]).all():  # evaluation batches always, training mostly
            held, block = self._block(int(keys[0]))
            return block.batch(np.searchsorted(held, positions), device=device, packed=packed, multiple=multiple)
        return self._gather(positions, keys).batch(np.arange(len(positions)), device=device, packed=packed,
                                                   multiple=multiple)

    def eval_batches(self, groups, *, device):
        """The batches of ``groups`` (`eval_groups`, which never span blocks), one block kept at a time
        while the next one is read in the background (`_ahead`)."""
        keys = [int(self._keys()[g[0]]) for g in groups if len(g)]
        self._device = device
        try:
            for i, group in enumerate(g for g in groups if len(g)):
                self._ahead(keys, i)
                yield self.batch(group, device=device)
        finally:
            self._let_go()

    def row_batches(self, chunks, *, device, dtype=None):
        """`SplitArrays.row_batch` of each chunk of consecutive positions (`evaluation.row_chunks`,
        which never span blocks), one block kept at a time while the next is read (`_ahead`)."""
        keys = [int(self._keys()[c[0]]) for c in chunks]
        self._device = device
        try:
            for i, chunk in enumerate(chunks):
                self._ahead(keys, i)
                held, block = self._block(keys[i])
                lo = int(np.searchsorted(held, chunk[0]))
                yield block.row_batch(lo, lo + len(chunk), device=device, dtype=dtype)
        finally:
            self._let_go()

    def _ahead(self, keys: list[int], i: int) -> None:
        """Before batch ``i`` of a pass over blocks ``keys``: drop the block the pass is done with when
        a new one starts, and start reading the next block, so the read overlaps this block's work."""
        if keys[i] not in self._blocks:
            self._blocks.clear()  # the previous block is done with: free it before taking the next
        following = next((k for k in keys[i:] if k != keys[i]), None)
        if following is not None and following not in self._blocks and following not in self._pending:
            self._pending[following] = _reader().submit(self._read_block, following)

    def _let_go(self) -> None:
        for pending in self._pending.values():
            pending.cancel()
        self._pending.clear()
        self._blocks.clear()

    def epoch_order(self, generator) -> np.ndarray:
        """One training epoch: blocks in an order drawn from ``generator``, and the sentences of each
        window of ``SHUFFLE_WINDOW`` consecutive blocks of that order in a drawn order. Each block is
        read about once per epoch; a held split's permutation of all sentences is not reproduced."""
        import torch

        keys = self._keys()
        blocks = np.unique(keys)
        blocks = blocks[torch.randperm(len(blocks), generator=generator).numpy()]
        window = budget.SHUFFLE_WINDOW
        parts = []
        for w in range(0, len(blocks), window):
            positions = np.flatnonzero(np.isin(keys, blocks[w:w + window]))
            parts.append(positions[torch.randperm(len(positions), generator=generator).numpy()])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _keys(self) -> np.ndarray:
        return self.cached("block keys", self.block_keys)

    def _block(self, key: int) -> tuple[np.ndarray, SplitArrays]:
        """(positions, their hidden states held) of block ``key``; the least recent blocks are dropped."""
        if key in self._blocks:
            self._blocks.move_to_end(key)
            return self._blocks[key]
        pending = self._pending.pop(key, None)
        self._blocks[key] = pending.result() if pending is not None else self._read_block(key)
        self._blocks[key][1].wait_for_copy()  # staged for a GPU: the compute stream waits, the host does not
        while len(self._blocks) > 2 * budget.SHUFFLE_WINDOW:  # a step spans at most two windows
            self._blocks.popitem(last=False)
        return self._blocks[key]

    def _read_block(self, key: int) -> tuple[np.ndarray, SplitArrays]:
        """Block ``key`` read from the cache: (its positions, their rows held)."""
        positions = np.flatnonzero(self._keys() == key)
        ids = self.sentence_ids[positions]
        hidden, scales = self.source.stored(sentences=ids, layers=list(self.layers))  # each layer a slice of the block
        offsets = np.concatenate([[0], np.cumsum(self.lengths[positions])]).astype(np.int64)
        block = SplitArrays(self.name, hidden, self.labels[self.rows_of(positions)], offsets, self.layers, ids,
                            self.starts[positions], scales, self.source.storage)
        device = self._device
        if device is not None and str(device).startswith("cuda"):
            _stage(block, device)
        return positions, block

    def _gather(self, positions: np.ndarray, keys: np.ndarray) -> SplitArrays:
        """The sentences at ``positions`` copied out of their blocks (a training step across blocks)."""
        hidden, scales, labels = [], [], []
        for p, key in zip(positions, keys):
            held, block = self._block(int(key))
            j = int(np.searchsorted(held, p))
            lo, hi = block.offsets[j], block.offsets[j + 1]
            hidden.append(block.hidden[lo:hi])
            scales.append(None if block.scales is None else block.scales[lo:hi])
            labels.append(block.labels[lo:hi])
        offsets = np.concatenate([[0], np.cumsum(self.lengths[positions])]).astype(np.int64)
        return SplitArrays(self.name, np.concatenate(hidden), np.concatenate(labels), offsets, self.layers,
                           self.sentence_ids[positions], self.starts[positions],
                           None if scales[0] is None else np.concatenate(scales), self.source.storage)


def _stage(block: SplitArrays, device) -> None:
    """Send ``block``'s tensors to the CUDA ``device`` through the process's pinned buffers, without
    waiting (`staging`): what its batches find (`SplitArrays.place`)."""
    from ..transfer import to_device
    from .staging import staging

    hidden, copied = staging().to_device(block.hidden, device)
    scales = None
    if block.scales is not None:
        scales, copied = staging().to_device(block.scales, device)  # one copy stream: the later event covers both
    block.place(device, (stored_tensor(hidden, block.storage), scales, to_device(block.labels, device),
                         to_device(block.offsets, device)), copied)
