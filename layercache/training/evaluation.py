"""Scoring a head on a split: seqeval micro-F1 and mean token cross-entropy, forward passes in
length-sorted batches. What never changes for a split (its gold entities, and for cached splits
its padded batches) is built once and kept by the split (`cached`)."""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.nn.functional as F

from .data import IGNORE, Split
from .metrics import Chunker, entity_f1

EVAL_CACHE_BYTES = 1 << 30  # padded float32 eval batches up to this size are built once per split


def score(tagger, split: Split, *, device, label_names, batch_size: int, autocast=None) -> tuple[float, float]:
    """(seqeval micro-F1, mean token cross-entropy) of ``tagger`` on ``split``; forward passes under
    ``autocast`` (the run's precision) when given."""
    tagger.eval()
    counts, preds = [], []
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    with torch.inference_mode(), autocast or contextlib.nullcontext():
        for batch in eval_batches(split, device=device, batch_size=batch_size):
            logits = tagger(batch.hidden, batch.mask).float()  # [B, T, n_labels]
            loss_sum += F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(),
                                        ignore_index=IGNORE, reduction="sum").double()
            keep = batch.labels != IGNORE  # [B, T]
            counts.append(keep.sum(1).cpu().numpy())  # words per sentence
            preds.append(logits.argmax(-1)[keep].cpu().numpy())  # flat, sentence after sentence
    counts, preds = np.concatenate(counts), np.concatenate(preds)
    label_names = tuple(str(n) for n in label_names)
    chunker = split.cached(("chunker", label_names), lambda: Chunker(label_names))
    gold = split.cached(("gold entities", label_names), lambda: _gold_entities(split, chunker, counts))
    return entity_f1(gold, chunker(preds, counts)), float(loss_sum) / max(int(counts.sum()), 1)


def _gold_entities(split: Split, chunker: Chunker, counts: np.ndarray) -> set:
    """The split's true entities, in the length order the predictions come in."""
    order = split.length_order()
    gold = np.concatenate([split.labels[split.offsets[p]:split.offsets[p + 1]] for p in order])
    return chunker(gold[gold != IGNORE], counts)


def eval_batches(split: Split, *, device, batch_size: int):
    """Length-sorted batches of ``split``; kept in memory across evaluations when the split is
    static and they are small enough, since padding and widening the same dev set 25 times per run
    is wasted work."""
    order = split.length_order()
    starts = range(0, len(order), batch_size)
    build = lambda: [split.batch(order[i:i + batch_size], device=device) for i in starts]  # noqa: E731
    if not split.static:  # live (FT) states change as the backbone trains
        return (split.batch(order[i:i + batch_size], device=device) for i in starts)
    padded = sum(len(order[i:i + batch_size]) * int(split.lengths[order[i:i + batch_size]].max(initial=0))
                 for i in starts)
    if padded * split.row_bytes > EVAL_CACHE_BYTES:
        return (split.batch(order[i:i + batch_size], device=device) for i in starts)
    return split.cached(("eval batches", str(device), batch_size), build)


def predict_tags(tagger, split: Split, *, device, batch_size: int = 64) -> list[np.ndarray]:
    """Tag ids per sentence (argmax per evaluated row), in the split's sentence order."""
    tagger.eval()
    preds: list = [None] * split.n_sentences
    order = split.length_order()
    with torch.inference_mode():
        for i in range(0, len(order), batch_size):
            pos = order[i:i + batch_size]
            batch = split.batch(pos, device=device)
            pred = tagger(batch.hidden, batch.mask).argmax(-1).cpu().numpy()  # [B, T]
            labels = batch.labels.cpu().numpy()
            for j, p in enumerate(pos):
                preds[p] = pred[j][labels[j] != IGNORE]
    return preds
