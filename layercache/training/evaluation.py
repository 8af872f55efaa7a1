"""Scoring a head on a split: seqeval micro-F1 and mean token cross-entropy, forward passes in
length-sorted batches within blocks of the cache (`Sentences.eval_groups`), the same batches
whether the split is held or streamed. What never changes for a split (its gold entities, and for
held splits their padded batches) is built once and kept by the split (`cached`)."""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.nn.functional as F

from ..cache.label_sets import SPAN, TOKEN
from ..cache.reader import rows_of
from . import budget
from .data import IGNORE, Split
from .metrics import Chunker, entity_f1, token_accuracy


def score(tagger, split: Split, *, device, label_names, batch_size: int, autocast=None,
          kind: str = SPAN) -> tuple[float, float]:
    """(seqeval micro-F1, mean token cross-entropy) of ``tagger`` on ``split``; forward passes under
    ``autocast`` (the run's precision) when given. Entities are compared in the split's own sentence
    order, so the F1 does not depend on the order the batches come in. A ``token`` label set (POS)
    gets token accuracy instead of F1."""
    tagger.eval()
    return score_heads(lambda hidden, mask: tagger(hidden, mask)[None], 1, split, device=device,
                       label_names=label_names, batch_size=batch_size, autocast=autocast, kind=kind)[0]


def score_heads(forward, n_heads: int, split: Split, *, device, label_names, batch_size: int, autocast=None,
                kind: str = SPAN) -> list[tuple[float, float]]:
    """`score` of ``n_heads`` heads whose logits ``forward(hidden, mask) -> [n_heads, B, T, n_labels]``
    computes at once, so each batch of the split is built once for all of them (a pack of heads,
    `layercache.training.packed`); one (metric, loss) per head, each by the same code as one head's."""
    counts, keeps, preds = [], [], [[] for _ in range(n_heads)]
    loss_sums = torch.zeros(n_heads, device=device, dtype=torch.float64)
    groups = split.eval_groups(batch_size)
    # Everything stays on the device until the pass is done: per batch, each sentence's word count,
    # which padded slots are words, and each head's argmax; one copy to the host at the end.
    with torch.inference_mode(), autocast or contextlib.nullcontext():
        for batch in eval_batches(split, device=device, batch_size=batch_size):
            logits = forward(batch.hidden, batch.mask).float()  # [K, B, T, n_labels]
            keep = batch.labels != IGNORE  # [B, T]
            counts.append(keep.sum(1))  # words per sentence
            keeps.append(keep.flatten())
            for k in range(n_heads):
                loss_sums[k] += F.cross_entropy(logits[k].flatten(0, 1), batch.labels.flatten(),
                                                ignore_index=IGNORE, reduction="sum").double()
                preds[k].append(logits[k].argmax(-1).flatten())  # [B*T], padding included
    counts, loss_sums = _host(counts), loss_sums.cpu().numpy()
    keep = _host(keeps).astype(bool)
    return [_metric(split, groups, counts, _host(p)[keep], float(loss_sum), label_names=label_names, kind=kind)
            for p, loss_sum in zip(preds, loss_sums)]


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
    scored = split.labels != IGNORE
    before = np.concatenate([[0], np.cumsum(scored)])
    counts = before[split.offsets[1:]] - before[split.offsets[:-1]]  # scored words per sentence
    return chunker(split.labels[scored], counts)


def eval_batches(split: Split, *, device, batch_size: int):
    """The batches of ``split.eval_groups``. A held split's padded, widened batches are kept across
    evaluations when they take at most ``budget.EVAL_CACHE_SHARE`` of the memory budget (MiniLM's
    CoNLL dev: 0.5 GB), since padding and widening the same dev set 25 times per run is wasted work;
    larger ones (roberta-large's dev: 5 GB in float32, twice what the store holds) are built batch by
    batch from the store on the device. A streamed split reads one block at a time."""
    groups = split.eval_groups(batch_size)
    if split.streamed:
        return split.eval_batches(groups, device=device)
    if not split.static:  # live (FT) states change as the backbone trains
        return (split.batch(group, device=device) for group in groups)
    padded = sum(len(group) * int(split.lengths[group].max(initial=0)) for group in groups)
    if padded * split.row_bytes > budget.EVAL_CACHE_SHARE * budget.memory_budget(device):
        return (split.batch(group, device=device) for group in groups)
    return split.cached(("eval batches", str(device), batch_size, budget.BLOCK_ROWS),
                        lambda: [split.batch(group, device=device) for group in groups])


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
