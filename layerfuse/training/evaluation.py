"""Scoring a head on a split: seqeval micro-F1 and mean token cross-entropy, forward passes in
length-sorted batches within blocks of the cache (`Split.eval_groups`), the same batches
whether the split is held or streamed. What never changes for a split (its gold entities, and for
held splits their padded batches) is built once and kept by the split (`cached`)."""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.nn.functional as F

from ..cache.label_sets import SPAN, TOKEN
from ..cache.reader import rows_of
from ..device import accumulator_dtype
from .arrays import IGNORE, Split
from .metrics import Chunker, entity_f1, token_accuracy


def score(tagger, split: Split, *, device, label_names, batch_size: int, autocast=None,
          kind: str = SPAN) -> tuple[float, float]:
    """(seqeval micro-F1, mean token cross-entropy) of ``tagger`` on ``split``; forward passes under
    ``autocast`` (the run's precision) when given. Entities are compared in the split's own sentence
    order, so the F1 does not depend on the order the batches come in. A ``token`` label set (POS)
    gets token accuracy instead of F1. A head whose output at a row depends on that row alone
    (Concat, DWAtt, ScalarMix, Base) reads a cached split's rows in order (`row_chunks`)."""
    tagger.eval()
    return score_heads(lambda hidden, mask: tagger(hidden, mask)[None], 1, split, device=device,
                       label_names=label_names, batch_size=batch_size, autocast=autocast, kind=kind,
                       token_wise=tagger.fusion.token_wise)[0]


def score_heads(forward, n_heads: int, split: Split, *, device, label_names, batch_size: int, autocast=None,
                kind: str = SPAN, token_wise: bool = False) -> list[tuple[float, float]]:
    """`score` of ``n_heads`` heads whose logits ``forward(hidden, mask) -> [n_heads, B, T, n_labels]``
    computes at once, so each batch of the split is built once for all of them (a pack of heads,
    `layerfuse.training.packed`); one (metric, loss) per head, each by the same code as one head's.

    ``token_wise`` heads on a cached split take its rows as they are held, in runs of consecutive
    sentences (`row_chunks`): no padding, no gather, and in the autocast dtype no conversion either
    (the store converts once). Other heads take length-sorted padded batches (`eval_batches`)."""
    if token_wise and split.static:
        groups, batches = rows_in_order(split, device=device, batch_size=batch_size, autocast=autocast)
    else:
        groups = split.eval_groups(batch_size)
        batches = eval_batches(split, device=device, batch_size=batch_size)
    keeps, preds = [], [[] for _ in range(n_heads)]
    acc = accumulator_dtype(device)  # float64, or float32 where the device has none (MPS)
    loss_sums = torch.zeros(n_heads, device=device, dtype=acc)
    # Everything stays on the device until the pass is done: per batch, which slots are words and
    # each head's argmax; one copy to the host at the end. no_grad, not inference_mode: autocast
    # keeps its low-precision copy of each weight for the pass only outside inference mode (inside
    # it, every batch cast Concat's 25M weights again at roberta-large shape: a third of the product).
    with torch.no_grad(), autocast or contextlib.nullcontext():
        for batch in batches:
            logits = forward(batch.hidden, batch.mask).float()  # [K, B, T, n_labels]
            keeps.append((batch.labels != IGNORE).flatten())  # [B*T]
            for k in range(n_heads):
                loss_sums[k] += F.cross_entropy(logits[k].flatten(0, 1), batch.labels.flatten(),
                                                ignore_index=IGNORE, reduction="sum").to(acc)
                preds[k].append(logits[k].argmax(-1).flatten())  # [B*T], padding included
    loss_sums = loss_sums.cpu().numpy()
    keep = _host(keeps).astype(bool)
    counts = _words_per_sentence(split)[np.concatenate(groups)] if groups else np.zeros(0, dtype=np.int64)
    return [_metric(split, groups, counts, _host(p)[keep], float(loss_sum), label_names=label_names, kind=kind)
            for p, loss_sum in zip(preds, loss_sums)]


ROWS_PER_SENTENCE = 16  # rows of a token-wise evaluation batch per sentence of ``batch_size``


def rows_in_order(split: Split, *, device, batch_size: int, autocast=None):
    """(chunks, their batches) of a cached split's rows in order (`row_chunks`), each ``[1, R, L, d]``
    in ``autocast``'s dtype (float32 without one): for heads whose output at a row depends on that
    row alone."""
    dtype = getattr(autocast, "fast_dtype", None) if autocast is not None else None
    chunks = row_chunks(split, rows=batch_size * ROWS_PER_SENTENCE)
    return chunks, split.row_batches(chunks, device=device, dtype=dtype)


def row_chunks(split: Split, *, rows: int) -> list[np.ndarray]:
    """Runs of consecutive sentence positions of about ``rows`` rows each (a sentence is never cut),
    never spanning an evaluation block (`Split.block_keys`), so a streamed split needs one block
    at a time and a held one reads exactly the same runs (same numbers)."""
    keys, lengths = split.block_keys(), split.lengths
    chunks, start, size = [], 0, 0
    for i in range(split.n_sentences):
        if i > start and (keys[i] != keys[start] or size + lengths[i] > rows):
            chunks.append(np.arange(start, i))
            start, size = i, 0
        size += int(lengths[i])
    if split.n_sentences:
        chunks.append(np.arange(start, split.n_sentences))
    return chunks


def non_finite_layers(split: Split, *, device, batch_size: int) -> list[int]:
    """The cache layers (0 = embeddings) of a cached ``split`` holding a nan or inf hidden value; none for a
    live one (FT: its states are the backbone's, which diverges with the head). One pass, once per split and
    layers: read only once a loss is not finite, never on the normal path."""
    def find():
        bad = None
        for batch in split.row_batches(row_chunks(split, rows=batch_size * ROWS_PER_SENTENCE), device=device):
            rows = ~torch.isfinite(batch.hidden).flatten(0, 1).all(0).all(-1)  # [R, L, d] -> [L]
            bad = rows if bad is None else bad | rows
        return [] if bad is None else [split.layers[j] for j in torch.nonzero(bad).flatten().tolist()]

    return split.cached(("non-finite layers", tuple(split.layers)), find) if split.static else []


def _words_per_sentence(split: Split) -> np.ndarray:
    """Scored words (labels != IGNORE) of each sentence, from the host's labels; once per split."""
    def count():
        scored = np.concatenate([[0], np.cumsum(split.labels != IGNORE)])
        return scored[split.offsets[1:]] - scored[split.offsets[:-1]]

    return split.cached("words per sentence", count)


def _host(parts: list) -> np.ndarray:
    """Tensors of one pass, concatenated on the device and copied to the host once."""
    return torch.cat(parts).cpu().numpy() if parts else np.zeros(0, dtype=np.int64)


def _metric(split: Split, groups, counts: np.ndarray, preds: np.ndarray, loss_sum: float, *, label_names,
            kind: str) -> tuple[float, float]:
    """(F1 or accuracy, mean loss) of one head's flat predictions, in ``groups`` order."""
    counts, preds = _in_split_order(groups, counts, preds)
    loss = loss_sum / max(int(counts.sum()), 1)
    if kind == TOKEN:
        return token_accuracy(split.labels[split.labels != IGNORE], preds), loss
    label_names = tuple(str(n) for n in label_names)
    chunker = split.cached(("chunker", label_names), lambda: Chunker(label_names))
    gold = split.cached(("gold entities", label_names), lambda: _gold_entities(split, chunker))
    return entity_f1(gold, chunker(preds, counts)), loss


def _in_split_order(groups, counts: np.ndarray, preds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(words per sentence, flat predictions) of sentences that came in ``groups`` order, put back in
    the split's order."""
    order = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))  # where each sentence of the split came in
    return counts[rank], preds[rows_of(np.concatenate([[0], np.cumsum(counts)]), rank)]


def _gold_entities(split: Split, chunker: Chunker) -> set:
    """The split's true entities, in its sentence order."""
    return chunker(split.labels[split.labels != IGNORE], _words_per_sentence(split))


def eval_batches(split: Split, *, device, batch_size: int):
    """The batches of ``split.eval_groups``, as the split hands them out (`SplitArrays.eval_batches`:
    a held split keeps them when they are small; a streamed one reads one block at a time)."""
    return split.eval_batches(batch_size, device=device)


def predict_tags(tagger, split: Split, *, device, batch_size: int = 64) -> list[np.ndarray]:
    """Tag ids per sentence (argmax per evaluated row), in the split's sentence order."""
    tagger.eval()
    preds: list = [None] * split.n_sentences
    groups = split.eval_groups(batch_size)
    with torch.inference_mode():
        for pos, batch in zip(groups, eval_batches(split, device=device, batch_size=batch_size)):
            pred = tagger(batch.hidden, batch.mask).argmax(-1).cpu().numpy()  # [B, T]
            labels = batch.labels.cpu().numpy()
            for j, p in enumerate(pos):
                preds[p] = pred[j][labels[j] != IGNORE]
    return preds
