"""A split of the cache and what every split shares: a cached split's sentences and layers
(`SplitArrays`: held as arrays, or streamed from the cache a block at a time, whichever the memory
budget allows: `store.open_split` picks, its callers never do), what the training loop and the
evaluation ask of every split, cached or live, and the bookkeeping they share (`Split`), and the
`Batch` a split hands out.

Below `data` (which loads what a run needs) and `store` (the activation store): each of them builds
on these classes, and none of them is imported here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..cache.reader import rows_of
from ..errors import LayerfuseError, removed_names
from . import budget

if TYPE_CHECKING:  # torch is imported where batches are built, not to read a cache
    import torch

IGNORE = -100  # label of padding and of non-first subwords: no loss, not evaluated

__getattr__ = removed_names(__name__, {"Sentences": "layerfuse.training.arrays.Split"})

_READER = []  # one thread per process reads a streamed split's next block while the current one computes


@dataclass(frozen=True)
class Batch:
    hidden: torch.Tensor  # [B, T, L, d] float32
    mask: torch.Tensor  # [B, T] bool, True = real row
    labels: torch.Tensor  # [B, T] int64, IGNORE at padding
    # Packed batches only (B = 1): the row count of each sentence, back to back from row 0; the
    # rows after them are padding. Heads that attend across a sentence need it. A host array
    # (numpy int64): known before the batch is built, so planning with it never waits for the device.
    lengths: np.ndarray | None = None


class Split:
    """What the training loop and the evaluation need of a split, cached (`SplitArrays`: held, or
    streamed from the cache block by block) or live (FT: `layerfuse.finetune.states.LiveSplit`),
    and the sentence bookkeeping they share: ``offsets [n + 1]`` (sentence i = rows
    offsets[i]:offsets[i + 1]) and ``labels [rows]``. Each kind gives `select`, `take_layers`,
    `batch` and ``row_bytes`` (the bytes of one row of a float32 batch)."""

    name: str
    labels: np.ndarray
    offsets: np.ndarray
    layers: tuple[int, ...]
    sentence_ids: np.ndarray

    static = True  # the hidden states never change (cached); live splits say False
    streamed = False  # read from the cache block by block (`SplitArrays`), never held whole
    starts = None  # the cache row where each sentence starts, when known: it fixes the evaluation blocks

    @property
    def n_sentences(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def n_words(self) -> int:
        return int(np.count_nonzero(self.labels != IGNORE))

    def rows_of(self, positions) -> np.ndarray:
        """Row indices of the sentences at ``positions``, concatenated."""
        return rows_of(self.offsets, positions)

    def block_keys(self) -> np.ndarray:
        """The evaluation block of each sentence: its first cache row // BLOCK_ROWS. Held and streamed
        splits group alike; a split that does not know its cache rows (live) is one block."""
        if self.starts is None:
            return np.zeros(self.n_sentences, dtype=np.int64)
        return np.asarray(self.starts, dtype=np.int64) // budget.BLOCK_ROWS

    def eval_groups(self, batch_size: int) -> list[np.ndarray]:
        """Positions of each evaluation batch: block after block in cache order, length-sorted
        (stable) within a block, at most ``batch_size``, never spanning blocks. A streamed split
        then needs one block at a time, and a held one batches exactly alike (same numbers)."""
        keys = self.block_keys()
        order = np.lexsort((self.lengths, keys))  # stable: ties keep the split's order
        blocks = np.split(order, np.flatnonzero(np.diff(keys[order])) + 1)
        return [block[i:i + batch_size] for block in blocks for i in range(0, len(block), batch_size)]

    def epoch_order(self, generator) -> np.ndarray:
        """The positions of one training epoch, in order: a permutation drawn from ``generator``."""
        import torch

        return torch.randperm(self.n_sentences, generator=generator).numpy()

    def begin_epoch(self, epoch: int, *, seed: int) -> None:
        """Called before each training epoch; cached splits have nothing to redo (FT MLM re-masks)."""

    def _layer_view(self, layers: Sequence[int], build):
        """This split with only ``layers`` (of those it holds), in that order: ``build(layers)`` makes
        the view; the last one is kept (a sweep's runs ask for the same layers again and again)."""
        layers = tuple(int(x) for x in layers)
        if layers == self.layers:
            return self
        missing = [x for x in layers if x not in self.layers]
        if missing:
            raise LayerfuseError(
                f"layers {missing} are not loaded for split {self.name!r} (it holds {list(self.layers)}); "
                f"load the data with those layers"
            )
        if self._last_view and self._last_view[0] == layers:
            return self._last_view[1]
        view = build(layers)
        self._last_view = (layers, view)  # only the last: dev of a big cache is hundreds of MB per view
        return view

    def cached(self, key, build):
        """``build()`` once per ``key`` for this split: values derived from it that never change
        (its gold entities, its padded eval batches), shared by every run of a sweep."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    def select(self, positions) -> Split:
        """The sentences at ``positions`` (0..n-1 of this split), in that order."""
        raise NotImplementedError

    def take_layers(self, layers: Sequence[int]) -> Split:
        """Only the given layers (of those this split holds), in the order given."""
        raise NotImplementedError

    def batch(self, positions, *, device, packed: bool = False, multiple: int = 1) -> Batch:
        """The sentences at ``positions`` as one `Batch` on ``device``."""
        raise NotImplementedError

    def eval_batches(self, batch_size: int, *, device):
        """The batches of `eval_groups` (a live split's states change as the backbone trains: each built
        when it is used)."""
        return (self.batch(group, device=device) for group in self.eval_groups(batch_size))


@dataclass(eq=False)
class SplitArrays(Split):
    """Some sentences of one cached split, some layers (rows are words, or subwords): held in memory,
    or streamed from the cache (``source``) when they exceed the memory budget (`store.open_split`
    picks; a caller asks the same of both and gets the same batches, bit for bit).

    A streamed split holds what is small (offsets, labels, sentence ids: a few bytes per row) and
    reads the hidden states of one block of ``budget.BLOCK_ROWS`` cache rows when a batch needs it,
    each layer as a slice (`CacheSplit.hidden`), as a held split of its own whose batches are built
    by the same code. It keeps at most ``2 * SHUFFLE_WINDOW`` blocks: what one training step can span;
    evaluation keeps one, while the next is read in the background. Evaluation order is the same
    held or streamed (`Split.eval_groups`). Training differs: a held split draws a permutation of
    all its sentences each epoch; a streamed one reads its blocks in a seeded random order and
    shuffles sentences within each window of ``SHUFFLE_WINDOW`` blocks (`epoch_order`), a different
    order, as deterministic for a seed."""

    name: str
    hidden: np.ndarray | None  # [rows, n_layers, d] as stored (float16, float32, int8; bfloat16 as uint16
    # bits); None when streamed
    labels: np.ndarray  # [rows] int64, IGNORE where no loss (non-first subwords)
    offsets: np.ndarray  # [n + 1] int64, sentence i = rows offsets[i]:offsets[i + 1]
    layers: tuple[int, ...]  # the cache layer id of each hidden[:, j]
    sentence_ids: np.ndarray  # [n] the cache's sentence ids, in the order held
    starts: np.ndarray | None = None  # [n] the cache row of each sentence's first row (None: unknown)
    scales: np.ndarray | None = None  # [rows, n_layers] float32: int8 storage's per-vector scales
    storage: str = "float16"  # the storage dtype's name (`CacheSplit.storage`): how to read ``hidden``
    source: object = None  # streamed: the CacheSplit its blocks are read from (sentences sorted by cache id)
    _memo: dict = field(default_factory=dict, repr=False)  # built once: tensors per device, true entities
    _last_view: tuple = field(default=(), repr=False)  # (layers, SplitArrays): a sweep's runs share it
    # Streamed: block key -> (positions, SplitArrays held); block key -> Future of `_read_block` (read
    # ahead); where the last batch went (blocks read ahead go there)
    _blocks: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _pending: dict = field(default_factory=dict, repr=False)
    _device: object = field(default=None, repr=False)

    @property
    def streamed(self) -> bool:
        return self.hidden is None

    def select(self, positions: np.ndarray) -> SplitArrays:
        """The sentences at ``positions`` (0..n-1 of this object), in that order: copied, or still
        streamed (nothing is read)."""
        positions = np.asarray(positions, dtype=np.int64)
        if len(positions) == self.n_sentences and np.array_equal(positions, np.arange(self.n_sentences)):
            return self
        lengths = self.lengths[positions]
        rows = self.rows_of(positions)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return SplitArrays(self.name, None if self.streamed else self.hidden[rows], self.labels[rows], offsets,
                           self.layers, self.sentence_ids[positions],
                           None if self.starts is None else self.starts[positions],
                           None if self.scales is None else self.scales[rows], self.storage, self.source)

    def hold(self, positions) -> SplitArrays:
        """The sentences at ``positions``, in that order, for a run to train on (a sample): held; a
        streamed split reads them from the cache (one read), unless they are all of it, which stays
        streamed."""
        positions = np.asarray(positions, dtype=np.int64)
        if not self.streamed or np.array_equal(positions, np.arange(self.n_sentences)):
            return self.select(positions)
        ids = self.sentence_ids[positions]
        by_id = np.argsort(ids, kind="stable")
        held = load_split(self.source, sentences=ids[by_id], layers=self.layers)  # one read, in cache order
        return held.select(np.argsort(by_id, kind="stable"))

    def take_layers(self, layers: Sequence[int]) -> SplitArrays:
        """Only the given cache layers (of those this split holds or streams), in the order given."""
        def build(layers):
            if self.streamed:  # the same sentences: gold entities and the like carry over
                return SplitArrays(self.name, None, self.labels, self.offsets, layers, self.sentence_ids,
                                   self.starts, None, self.storage, self.source, _memo=self._memo)
            index = [self.layers.index(x) for x in layers]
            scales = None if self.scales is None else np.ascontiguousarray(self.scales[:, index])
            return SplitArrays(self.name, np.ascontiguousarray(self.hidden[:, index]), self.labels, self.offsets,
                               layers, self.sentence_ids, self.starts, scales, self.storage)

        return self._layer_view(layers, build)

    def layer(self, layer: int) -> np.ndarray:
        """[rows, d] of one cache layer of these sentences, as numbers (float16 or float32); streamed:
        one slice read (auto:K ranks with it)."""
        from ..cache.codec import codec_of  # torch: only where a held split is read as numbers

        if self.streamed:
            whole = len(self.sentence_ids) == self.source.n_sentences and np.array_equal(
                self.sentence_ids, np.arange(self.source.n_sentences))
            return self.source.hidden(sentences=None if whole else self.sentence_ids, layers=[layer])[:, 0]
        j = self.layers.index(layer)
        return codec_of(self.storage).decode(self.hidden[:, j], None if self.scales is None else self.scales[:, j])

    @property
    def nbytes(self) -> int:
        """Bytes held: the stored values, and int8's scales (streamed: none)."""
        if self.streamed:
            return 0
        return int(self.hidden.nbytes) + (0 if self.scales is None else int(self.scales.nbytes))

    @property
    def row_bytes(self) -> int:
        """Bytes of one row of a float32 batch: what an eval batch costs per padded row."""
        if self.streamed:
            return len(self.layers) * self.source.dim * 4
        return self.hidden.shape[1] * self.hidden.shape[2] * 4

    def _tensors(self, device, dtype=None):
        """(hidden [rows, L, d], scales [rows, L] or None, labels [rows], offsets [n+1]) on ``device``,
        made once: the hidden states in the storage dtype (int8 with its scales: each batch is
        widened on the device), or converted once to ``dtype`` (the autocast dtype of a run, so its
        batches are slices and gathers, never conversions)."""
        import torch

        def build():
            if dtype is not None and _on(device) in self._memo:  # already there (a staged block)
                hidden, scales, labels, offsets = self._tensors(device)
                return widen(hidden, scales, dtype), None, labels, offsets
            hidden = stored_tensor(self.hidden, self.storage).to(device)
            scales = None if self.scales is None else torch.from_numpy(self.scales).to(device)
            if dtype is not None:
                hidden, scales = widen(hidden, scales, dtype), None
            return hidden, scales, torch.from_numpy(self.labels).to(device), torch.from_numpy(self.offsets).to(device)

        return self.cached(_on(device, dtype), build)

    def place(self, device, tensors, copied) -> None:
        """What `_tensors` gives on ``device``, already sent there (a streamed block staged for a GPU),
        and the CUDA event its copy records, which `wait_for_copy` hands to the compute stream."""
        self._memo[_on(device)] = tensors
        self._memo["staged"] = (device, copied)

    def wait_for_copy(self) -> None:
        """For a block staged by `place`, once: the current stream waits for its copy on the device
        (the host does not), and the allocator learns the tensors are used there."""
        staged = self._memo.pop("staged", None)
        if staged is not None:
            from .staging import ready

            device, copied = staged
            ready(self._memo[_on(device)][:2], copied)

    def row_batch(self, lo: int, hi: int, *, device, dtype=None) -> Batch:
        """The sentences at positions ``lo:hi`` as one ``[1, R, L, d]`` run of their rows, no padding
        and no gather (a slice of the held rows): for heads whose output at a row depends on that row
        alone. ``dtype``: the rows' dtype (None: float32). A split converted once to ``dtype``
        (`converted`) gives a view; otherwise the slice is widened on the way."""
        import torch

        dtype = dtype or torch.float32
        hidden, scales, labels, _ = self._tensors(device, dtype if self.converted(device, dtype) else None)
        a, b = int(self.offsets[lo]), int(self.offsets[hi])
        x = widen(hidden[a:b], None if scales is None else scales[a:b], dtype)  # [R, L, d]: a view when in dtype
        mask = torch.ones((1, b - a), dtype=torch.bool, device=hidden.device)
        return Batch(x[None], mask, labels[a:b][None])

    def converted(self, device, dtype) -> bool:
        """Whether this split's rows are kept converted to ``dtype`` (the run's autocast dtype) on
        ``device``: made once when the copy fits the memory budget at that moment (on a GPU it
        replaces the storage-dtype copy there; on a CPU it sits beside the host array)."""
        import torch

        narrower = np.dtype(self.hidden.dtype).itemsize < torch.tensor([], dtype=dtype).element_size()
        if dtype in (None, torch.float32) or narrower:
            return False  # float32 batches are widened per batch: a float32 copy would double the split
        if _on(device, dtype) in self._memo:
            return True
        return self.nbytes <= budget.memory_budget(device)

    def batch(self, positions, *, device, packed: bool = False, multiple: int = 1) -> Batch:
        """Sentences at ``positions`` padded to ``[B, T, L, d]`` float32 (zeros at padding), or with
        ``packed`` all their rows as one ``[1, rows, L, d]`` sequence: for token-wise heads that is
        the same computation without the padding (about half of a random batch of CoNLL).

        ``multiple`` rounds T (or the packed rows) up to a multiple of it with more padding: a few
        distinct shapes instead of one per batch, which matters on CPU, where oneDNN builds a new
        kernel for every new matrix shape (~5 ms each in bfloat16, more than the product itself).
        A streamed split builds it from the blocks that hold ``positions`` (read when not kept).
        """
        import torch

        if self.streamed:
            return self._streamed_batch(positions, device=device, packed=packed, multiple=multiple)

        from ..transfer import to_device

        hidden, scales, labels, offsets = self._tensors(device)
        positions = np.asarray(positions, dtype=np.int64)
        host_lengths = self.lengths[positions]  # [B]: known on the host, so no shape waits for the device
        pos = to_device(positions, offsets.device)  # [B]: the only copy; rows are indexed on the device
        starts = offsets[pos]  # [B]
        lengths = offsets[pos + 1] - starts  # [B]
        if packed:
            n = int(host_lengths.sum())
            pad = -n % multiple
            first = torch.cumsum(lengths, 0) - lengths  # [B]: where each sentence goes in the packed rows
            rows = torch.repeat_interleave(starts - first, lengths, output_size=n) + torch.arange(
                n, device=offsets.device)  # [n] cache rows, sentence after sentence
            x = hidden.new_empty((n + pad, *hidden.shape[1:]), dtype=torch.float32)  # [rows, L, d]
            x[:n] = widen(hidden[rows], None if scales is None else scales[rows],  # gathered, then widened
                          torch.float32)
            x[n:] = 0
            y = labels[rows]
            if pad:
                y = torch.cat([y, y.new_full((pad,), IGNORE)])
            mask = torch.arange(n + pad, device=offsets.device) < n
            return Batch(x[None], mask[None], y[None], host_lengths)
        T = int(host_lengths.max(initial=0))
        T += -T % multiple
        steps = torch.arange(T, device=offsets.device)
        mask = steps[None, :] < lengths[:, None]  # [B, T]
        rows = torch.where(mask, starts[:, None] + steps[None, :], 0)  # [B, T], padding -> row 0
        x = hidden[rows]  # [B, T, L, d] storage dtype
        x.masked_fill_(~mask[:, :, None, None], 0)  # zeros at padding (on the narrow dtype: cheaper)
        y = torch.where(mask, labels[rows], IGNORE)  # [B, T]
        return Batch(widen(x, None if scales is None else scales[rows], torch.float32), mask, y)


    def eval_batches(self, batch_size: int, *, device):
        """The batches of `eval_groups`. A held split's padded, widened batches are kept across
        evaluations when they take at most ``budget.EVAL_CACHE_SHARE`` of the memory budget (MiniLM's
        CoNLL dev: 0.5 GB), since padding and widening the same dev set 25 times per run is wasted
        work; larger ones (roberta-large's dev: 5 GB in float32, twice what the store holds) are built
        batch by batch on the device. A streamed split keeps one block at a time, while the next one
        is read in the background (`_ahead`)."""
        groups = self.eval_groups(batch_size)
        if self.streamed:
            return self._streamed_eval_batches(groups, device=device)
        padded = sum(len(group) * int(self.lengths[group].max(initial=0)) for group in groups)
        if padded * self.row_bytes > budget.EVAL_CACHE_SHARE * budget.memory_budget(device):
            return (self.batch(group, device=device) for group in groups)
        return self.cached(("eval batches", str(device), batch_size, budget.BLOCK_ROWS),
                           lambda: [self.batch(group, device=device) for group in groups])

    def row_batches(self, chunks, *, device, dtype=None):
        """`row_batch` of each chunk of consecutive positions (`evaluation.row_chunks`, which never span
        blocks); streamed: one block kept at a time while the next is read (`_ahead`)."""
        if not self.streamed:
            return (self.row_batch(int(c[0]), int(c[-1]) + 1, device=device, dtype=dtype) for c in chunks)
        return self._streamed_row_batches(chunks, device=device, dtype=dtype)

    def epoch_order(self, generator) -> np.ndarray:
        """The positions of one training epoch, in order: held, a permutation drawn from ``generator``;
        streamed, blocks in an order drawn from ``generator`` and the sentences of each window of
        ``SHUFFLE_WINDOW`` consecutive blocks of that order in a drawn order (each block read about
        once per epoch; a held split's permutation of all sentences is not reproduced)."""
        import torch

        if not self.streamed:
            return super().epoch_order(generator)
        keys = self._keys()
        blocks = np.unique(keys)
        blocks = blocks[torch.randperm(len(blocks), generator=generator).numpy()]
        window = budget.SHUFFLE_WINDOW
        parts = []
        for w in range(0, len(blocks), window):
            positions = np.flatnonzero(np.isin(keys, blocks[w:w + window]))
            parts.append(positions[torch.randperm(len(positions), generator=generator).numpy()])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------------ streamed: blocks of the cache

    def _streamed_batch(self, positions, *, device, packed: bool, multiple: int) -> Batch:
        positions = np.asarray(positions, dtype=np.int64)
        self._device = device
        keys = self._keys()[positions]
        if len(keys) and (keys == keys[0]).all():  # evaluation batches always, training mostly
            held, block = self._block(int(keys[0]))
            return block.batch(np.searchsorted(held, positions), device=device, packed=packed, multiple=multiple)
        return self._gather(positions, keys).batch(np.arange(len(positions)), device=device, packed=packed,
                                                   multiple=multiple)

    def _streamed_eval_batches(self, groups, *, device):
        keys = [int(self._keys()[g[0]]) for g in groups if len(g)]
        self._device = device
        try:
            for i, group in enumerate(g for g in groups if len(g)):
                self._ahead(keys, i)
                yield self.batch(group, device=device)
        finally:
            self._let_go()

    def _streamed_row_batches(self, chunks, *, device, dtype):
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
                            self.starts[positions], scales, self.storage)
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
                           None if scales[0] is None else np.concatenate(scales), self.storage)


def _reader():
    """The read-ahead thread (zarr's reads and decompression release the GIL)."""
    if not _READER:
        from concurrent.futures import ThreadPoolExecutor

        _READER.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="layerfuse-read-ahead"))
    return _READER[0]


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


def _on(device, dtype=None) -> tuple:
    """The key under which a split keeps its tensors on ``device`` (converted to ``dtype``; None: stored)."""
    return ("tensors", str(device), str(dtype))


def stored_tensor(values, storage: str):
    """Held values (numpy, or a tensor of their bytes on a device) as a tensor of the storage dtype
    (bfloat16 is held as its uint16 bits: a view)."""
    import torch

    from ..cache.codec import codec_of

    tensor = values if isinstance(values, torch.Tensor) else torch.from_numpy(values)
    return tensor.view(codec_of(storage).torch_dtype)


def widen(values, scales, dtype):
    """Stored values (a slice or gather of `stored_tensor`) as ``dtype`` on their device: int8 times
    its per-vector scale (float32 ``scales [..., L]``, the product in float32), the others cast."""
    from ..cache.codec import decode_torch

    return decode_torch(values, scales, dtype)


def sentence_rows(split, sentences) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cache ids, offsets, labels) of ``sentences`` (None = all, in order) of a `CacheSplit`: the
    bookkeeping kept for them, whether their hidden states are held or streamed."""
    if sentences is None:
        ids = np.arange(split.n_sentences, dtype=np.int64)
        rows = slice(None)
        offsets = split.offsets.astype(np.int64)
    else:
        ids = np.asarray(sentences, dtype=np.int64)
        rows = split.rows_of(ids)
        lengths = split.offsets[ids + 1] - split.offsets[ids]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    labels = split.labels[rows].astype(np.int64)  # [rows]
    if "word_index" in split.group:  # subword cache: a word's tag counts once, on its first subword
        word_index = split.group["word_index"][:][rows]
        first = np.ones(len(labels), dtype=bool)
        first[1:] = word_index[1:] != word_index[:-1]
        first[offsets[:-1][np.diff(offsets) > 0]] = True  # every sentence starts a word
        first[word_index < 0] = False  # special tokens' rows (`extract --special-tokens`): seen, never scored
        labels[~first] = IGNORE
    return ids, offsets, labels


def load_split(split, *, sentences, layers: Sequence[int]) -> SplitArrays:
    """Read ``sentences`` (None = all, in order) of a `CacheSplit` with ``layers``: one cache read."""
    ids, offsets, labels = sentence_rows(split, sentences)
    hidden, scales = split.stored(sentences=sentences, layers=list(layers))  # [rows, L, d] as stored
    return SplitArrays(split.name, hidden, labels, offsets, tuple(int(x) for x in layers), ids,
                       split.offsets[ids].astype(np.int64), scales, split.storage)
