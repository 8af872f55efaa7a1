"""The forward pass over one unit of rows: length-sorted, token-budget batches, every layer gathered
at the pooled positions straight from the model's hidden states."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from ..cache.codec import first_overflow, wider_dtypes
from ..errors import LayerfuseError
from ..precision import PRECISIONS as _TABLE
from ..precision import precision_of
from .tokenize import Tokenized, special_tokens, subword_layout, windows

PRECISIONS = {name: p.autocast_dtype for name, p in _TABLE.items()}  # the earlier name: precision -> autocast dtype


def _storage_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class RowMap:
    """Where each subword's vector goes: `row[k]` (global row) with weight `weight[k]`, for the
    subwords that pooling needs (`needed[k]`)."""

    row: np.ndarray
    needed: np.ndarray
    weight: np.ndarray | None  # None: each row takes exactly one subword (copied bit for bit)
    row_offsets: np.ndarray  # [S + 1] rows per sentence, cumulated
    # Rows of the special tokens before and after each sentence's content (subword caches with
    # `--special-tokens`): they lead and close the sentence's rows (`tokenize.subword_layout`).
    specials: tuple[int, int] = (0, 0)


def row_map(tok: Tokenized, *, granularity: str, pooling: str, specials: tuple[int, int] = (0, 0)) -> RowMap:
    n_sub = len(tok.ids)
    if granularity == "subword":
        row_offsets, row = subword_layout(tok, specials)
        return RowMap(row, np.ones(n_sub, bool), None, row_offsets, tuple(specials))
    if specials != (0, 0):
        raise LayerfuseError("special-token rows need subword granularity")
    row = tok.global_word_of_sub()
    change = np.ones(n_sub + 1, bool)
    change[1:-1] = row[1:] != row[:-1]
    if pooling == "first":
        return RowMap(row, change[:-1], None, tok.word_offsets)
    if pooling == "last":
        return RowMap(row, change[1:], None, tok.word_offsets)
    counts = np.bincount(row, minlength=int(tok.word_offsets[-1]))
    return RowMap(row, np.ones(n_sub, bool), (1.0 / counts[row]).astype(np.float32), tok.word_offsets)


@dataclass
class Window:
    sentence: int
    start: int  # subword span [start, end) of the sentence fed to the model
    end: int
    keep_lo: int  # subwords [keep_lo, keep_hi) take their vectors from this window
    keep_hi: int


class UnitEncoder:
    def __init__(self, model, tokenizer, *, device, precision: str, token_budget: int, max_length: int,
                 pad_to_multiple: int = 1):
        """``pad_to_multiple``: each batch padded to a multiple of this many tokens (at most
        ``max_length``), so that batches come in few shapes (`live.LiveBackbone`: on a GPU)."""
        self.model, self.device = model, device
        self.pad_to_multiple = pad_to_multiple
        self.precision = precision_of(precision)
        self.autocast_dtype = self.precision.autocast_dtype
        self.token_budget, self.max_length = token_budget, max_length
        self.prefix_ids, self.suffix_ids = special_tokens(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.width = max_length - len(self.prefix_ids) - len(self.suffix_ids)

    def plan_batches(self, tok: Tokenized, sentences: range) -> list[list[Window]]:
        """Windows of the given sentences sorted by length (stable) and cut into batches whose
        padded size (`padded_width` included) stays within the token budget; a window longer than the
        budget goes alone."""
        wins = []
        for s in sentences:
            n = int(tok.sub_offsets[s + 1] - tok.sub_offsets[s])
            wins.extend(Window(s, *w) for w in windows(n, self.width))
        wins.sort(key=lambda w: w.end - w.start)
        batches, current = [], []
        extra = len(self.prefix_ids) + len(self.suffix_ids)
        for w in wins:
            padded = self.padded_width(w.end - w.start + extra) * (len(current) + 1)  # w: the longest yet
            if current and padded > self.token_budget:
                batches.append(current)
                current = []
            current.append(w)
        if current:
            batches.append(current)
        return batches

    def inputs(self, tok: Tokenized, batch: list[Window]) -> tuple[torch.Tensor, torch.Tensor]:
        seqs = [
            self.prefix_ids
            + tok.ids[tok.sub_offsets[w.sentence] + w.start : tok.sub_offsets[w.sentence] + w.end].tolist()
            + self.suffix_ids
            for w in batch
        ]
        T = self.padded_width(max(len(s) for s in seqs))
        ids = np.full((len(seqs), T), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(seqs), T), dtype=np.int64)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = s
            mask[i, : len(s)] = 1
        return torch.from_numpy(ids).to(self.device), torch.from_numpy(mask).to(self.device)

    def padded_width(self, longest: int) -> int:
        """The width a batch whose longest sequence has ``longest`` tokens is padded to."""
        m = self.pad_to_multiple
        return max(longest, min(-(-longest // m) * m, self.max_length))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                grad: bool = False) -> tuple[torch.Tensor, ...]:
        """Every layer's hidden states, embeddings first (HF order); `grad` keeps the graph (FT)."""
        ctx = self.precision.autocast(torch.device(self.device).type)  # FT passes the device by name
        with (contextlib.nullcontext() if grad else torch.inference_mode()), ctx:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return out.hidden_states

    def encode_unit(self, tok: Tokenized, rows: RowMap, lo: int, hi: int, *, storage: torch.dtype,
                    grad: bool = False, split: str | None = None, ahead: bool = True) -> torch.Tensor:
        """[hi - lo, L+1, d] for rows lo:hi, in the storage dtype, still on the device. The same
        code serves extraction and live (FE-on-the-fly or fine-tuning) features, so they agree.

        Each batch's inputs and target positions are built one batch ahead in a thread, so the
        forward pass never waits for them; rows taken as they are (first/last pooling) are written
        straight in the storage dtype (the same bits as converting at the end, one pass fewer).

        With ``split`` (extraction), a value the storage dtype cannot hold, or one the forward pass
        already made inf/nan, raises a LayerfuseError naming the split and layer: float16 tops out
        at 65504, and a cache of infinities would otherwise pass for a good one until training.
        ``ahead=False``: no thread (a live batch is one forward pass: nothing to prepare ahead of it)."""
        first = int(np.searchsorted(rows.row_offsets, lo, side="right") - 1)
        last = int(np.searchsorted(rows.row_offsets, hi, side="left"))
        out = None
        ends = []  # per batch, [L+1, 2] min and max of each layer's values before narrowing
        prepared = self._prepared(tok, rows, range(first, last), lo, hi)
        for inputs, (pos, dest, weight) in _ahead(prepared) if ahead else prepared:
            if not len(pos):  # a window of a long sentence whose words all lie in the next unit (or the last)
                continue
            hidden = self.forward(*inputs, grad=grad)
            if out is None:
                dtype = storage if weight is None else torch.float32  # mean pooling sums in float32
                out = torch.zeros((hi - lo, len(hidden), hidden[0].shape[-1]), dtype=dtype, device=self.device)
            gathered, bounds = _gather(hidden, pos, out.dtype, bounds=split is not None and weight is None)
            if bounds is not None:
                ends.append(bounds)
            if weight is None:
                out.index_copy_(0, dest, gathered)
            else:
                out.index_add_(0, dest, gathered * weight[:, None, None])
        if split is None or out is None:
            return out.to(storage)
        return self._narrowed(out, ends, rows, storage, split)

    def _narrowed(self, out: torch.Tensor, ends: list[torch.Tensor], rows: RowMap, storage: torch.dtype,
                  split: str) -> torch.Tensor:
        """The unit in the storage dtype, checked to fit it (`_check_fits`)."""
        if rows.weight is None:  # first/last pooling: the stored values are the ones seen above
            self._check_fits(torch.stack(ends).float().abs().amax(dim=(0, 2)), storage, split)
            return out
        # Mean pooling stores the float32 mean, not any one subword: one pass over the narrowed unit
        # (0.5% of the forward on CPU here; a pass per layer over the float32 sums cost 3%), and the
        # per-layer magnitudes are computed from those sums only when something did not fit.
        narrowed = out.to(storage)
        if out.numel() and not bool(torch.isfinite(torch.stack(torch.aminmax(narrowed))).all()):
            self._check_fits(torch.maximum(out.amax(dim=(0, 2)), -out.amin(dim=(0, 2))), storage, split)
        return narrowed

    def _check_fits(self, peak: torch.Tensor, storage: torch.dtype, split: str) -> None:
        """``peak``: each layer's largest magnitude before narrowing (nan if any value is nan); the
        range check is the codec's (`codec.first_overflow`), the message says what to do instead."""
        layer = first_overflow(peak, storage)
        if layer is None:
            return
        value = float(peak.float().cpu()[layer])
        where = f"split {split!r}, layer {layer} (0 = embeddings): largest magnitude"
        name = _storage_name(storage)
        wider = " or ".join(f"--dtype {dtype}" for dtype in wider_dtypes(storage)) or None
        if np.isfinite(value):
            largest = torch.finfo(storage).max
            raise LayerfuseError(f"{where} {value:.4g} does not fit {name} (largest {largest:.6g}); "
                                  f"extract with {wider}")
        autocast = self.precision.name if self.autocast_dtype is not None else None
        if autocast is None:
            raise LayerfuseError(f"{where} {value}: the forward pass is non-finite in float32 already; "
                                  f"no --dtype can store it")
        then = f" (then {wider} if the values do not fit {name})" if wider else ""
        raise LayerfuseError(f"{where} {value}: the forward pass under --precision {autocast} is non-finite "
                              f"already; extract with --precision fp32{then}")

    def _prepared(self, tok: Tokenized, rows: RowMap, sentences: range, lo: int, hi: int):
        """(model inputs, targets) of each batch of ``sentences``, in order."""
        for batch in self.plan_batches(tok, sentences):
            ids, mask = self.inputs(tok, batch)
            yield (ids, mask), self._targets(tok, rows, batch, ids.shape[1], lo, hi)

    def _targets(self, tok, rows: RowMap, batch: list[Window], T: int, lo: int, hi: int):
        """Flat positions in the [B*T] batch of the subwords this unit needs, their rows, weights."""
        pos, subs = [], []
        for b, w in enumerate(batch):
            base = int(tok.sub_offsets[w.sentence])
            k = np.arange(base + w.keep_lo, base + w.keep_hi)
            k = k[rows.needed[k]]
            r = rows.row[k]
            k = k[(r >= lo) & (r < hi)]
            subs.append(k)
            pos.append(b * T + len(self.prefix_ids) + (k - base - w.start))
        subs, pos = np.concatenate(subs), np.concatenate(pos)
        dest = rows.row[subs] - lo
        if rows.specials != (0, 0):
            more_pos, more_rows = self._special_targets(tok, rows, batch, T)
            inside = (more_rows >= lo) & (more_rows < hi)
            pos, dest = np.concatenate([pos, more_pos[inside]]), np.concatenate([dest, more_rows[inside] - lo])
        weight = None if rows.weight is None else torch.from_numpy(rows.weight[subs]).to(self.device)
        return torch.from_numpy(pos).to(self.device), torch.from_numpy(dest).to(self.device), weight

    def _special_targets(self, tok, rows: RowMap, batch: list[Window], T: int) -> tuple[np.ndarray, np.ndarray]:
        """Flat positions and rows of the special tokens a sentence keeps: those before the content
        of its first window and those after the content of its last (one window: its own)."""
        before, after = len(self.prefix_ids), len(self.suffix_ids)
        if rows.specials != (before, after):
            raise LayerfuseError(f"the rows hold {rows.specials} special tokens around each sentence, the "
                                  f"tokenizer adds {(before, after)}")
        pos, dest = [], []
        for b, w in enumerate(batch):
            n_sub = int(tok.sub_offsets[w.sentence + 1] - tok.sub_offsets[w.sentence])
            if w.keep_lo == 0:
                pos.append(b * T + np.arange(before))
                dest.append(rows.row_offsets[w.sentence] + np.arange(before))
            if w.keep_hi == n_sub:
                pos.append(b * T + before + (w.end - w.start) + np.arange(after))
                dest.append(rows.row_offsets[w.sentence + 1] - after + np.arange(after))
        empty = np.zeros(0, dtype=np.int64)
        return (np.concatenate(pos).astype(np.int64) if pos else empty,
                np.concatenate(dest).astype(np.int64) if dest else empty)


def _gather(hidden, pos: torch.Tensor, dtype: torch.dtype, *,
            bounds: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[rows of the batch, L+1, d] at the flat positions ``pos`` of every layer, in ``dtype``; with
    ``bounds``, also each layer's [min, max] before narrowing ([L+1, 2])."""
    # Each layer narrowed to the storage dtype before stacking: half the bytes for the stack
    # and the copy into the unit (the same bits as converting after).
    layers, ends = [], []
    for h in hidden:
        picked = h.reshape(-1, h.shape[-1]).index_select(0, pos)
        if bounds:
            # One pass over values still in cache (0.4% of the forward on CPU here), and
            # these are the magnitudes an error reports: the narrowed unit holds only inf.
            ends.append(torch.stack(torch.aminmax(picked)))
        layers.append(picked.to(dtype))
    return torch.stack(layers, dim=1), (torch.stack(ends) if ends else None)


def _ahead(items, depth: int = 2):
    """``items`` produced by a thread up to ``depth`` ahead of the consumer (the producer's numpy
    and tensor work overlaps the forward pass, which releases the GIL); its errors surface here."""
    import queue
    import threading

    done = object()
    buffer: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce():
        try:
            for item in items:
                if stop.is_set():
                    return
                buffer.put((item, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            buffer.put((None, exc))
            return
        buffer.put((done, None))

    thread = threading.Thread(target=produce, daemon=True, name="layerfuse-inputs")
    thread.start()
    try:
        while True:
            item, error = buffer.get()
            if error is not None:
                raise error
            if item is done:
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # let a producer blocked on a full buffer see the stop
            try:
                buffer.get_nowait()
            except queue.Empty:
                thread.join(timeout=0.01)
