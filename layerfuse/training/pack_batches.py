"""A pack's training batches, built for all its heads at once (`packed.Pack.step`).

The K runs' train samples are held side by side as one split on the device (`PackRows`), so a pack
step gathers every head's rows with one index: a handful of kernels whatever K is, where building K
batches and padding them into one shape cost about ten kernels a head (on a GPU, where a few-shot
step is bound by kernel launches, most of a packed Concat step). The rows are those of each head's
own packed batch (`SplitArrays.batch`), and so are the padding (zeros, mask False, labels IGNORE)
and the shape: ``[K, 1, R]``, R the largest head's rows rounded up to ``multiple``.
"""

from __future__ import annotations

import numpy as np
import torch

from ..transfer import to_device
from .arrays import IGNORE, SplitArrays, widen


class PackRows:
    """The train samples of a pack's runs as one held split, head k's sentences after head k-1's
    (one copy of a split that several runs share)."""

    def __init__(self, splits: list[SplitArrays]):
        # Runs that train on one split (all of train: N = all) or on one sample (a seed's epoch caps)
        # share it, held once; other samples are held side by side.
        unique = list({_sample_key(s): s for s in splits}.values())
        starts = dict(zip(map(_sample_key, unique), np.cumsum([0] + [s.n_sentences for s in unique])[:-1]))
        self.first = np.array([starts[_sample_key(s)] for s in splits], dtype=np.int64)  # head k's first sentence
        self.split = unique[0] if len(unique) == 1 else concatenated(unique)

    def batch(self, orders: list[np.ndarray], *, heads: list[int], device, dtype: torch.dtype, multiple: int):
        """(hidden ``[K, 1, R, L, d]`` in ``dtype``, mask ``[K, 1, R]``, labels ``[K, 1, R]``, each head's
        sentence lengths as host arrays): head ``heads[i]``'s packed batch of its positions ``orders[i]``
        in row ``i``. The plan (which sentence goes where) is made on the host from the lengths it
        already knows; the rows are indexed on the device, from one copy of that plan."""
        split = self.split
        hidden, scales, labels, offsets = split._tensors(device, dtype if split.converted(device, dtype) else None)
        positions = np.concatenate([np.asarray(o, dtype=np.int64) + self.first[k] for o, k in zip(orders, heads)])
        lengths = split.lengths[positions]  # host
        per_head = np.split(lengths, np.cumsum([len(o) for o in orders])[:-1])
        n_rows = [int(ls.sum()) for ls in per_head]
        width = max(n_rows) + -max(n_rows) % multiple  # R
        # where each sentence's first row goes in the [K * R] rows: head i's sentences from row i * R
        to = np.concatenate([i * width + np.cumsum(ls) - ls for i, ls in enumerate(per_head)])
        plan = to_device(np.stack([positions, to]), offsets.device)  # [2, S]: the step's one copy
        starts = offsets[plan[0]]
        counts = offsets[plan[0] + 1] - starts  # [S], the lengths again, on the device
        n = int(lengths.sum())
        packed_first = torch.cumsum(counts, 0) - counts
        step = torch.arange(n, device=offsets.device)
        src = torch.repeat_interleave(starts - packed_first, counts, output_size=n) + step  # [n] held rows
        dst = torch.repeat_interleave(plan[1] - packed_first, counts, output_size=n) + step  # [n] batch rows
        k = len(orders)
        x = hidden.new_zeros((k * width, *hidden.shape[1:]), dtype=dtype)
        x[dst] = widen(hidden[src], None if scales is None else scales[src], dtype)
        y = labels.new_full((k * width,), IGNORE)
        y[dst] = labels[src]
        mask = torch.zeros(k * width, dtype=torch.bool, device=offsets.device).index_fill_(0, dst, True)  # a
        # scalar fill: ``mask[dst] = True`` would copy a host tensor holding True over, and wait for it
        return x.view(k, 1, width, *x.shape[1:]), mask.view(k, 1, width), y.view(k, 1, width), per_head


def _sample_key(split: SplitArrays) -> tuple:
    """What makes two of a pack's train splits the same rows: its layers and its sentences (the runs
    of a pack read one entry; a seed's sample is drawn anew, as another object, for each of its runs)."""
    return tuple(split.layers), split.sentence_ids.tobytes()


def concatenated(splits: list[SplitArrays]) -> SplitArrays:
    """``splits`` (the same layers and storage) as one, their sentences one split after another."""
    first = splits[0]
    rows = np.cumsum([0] + [len(s.labels) for s in splits])
    offsets = np.concatenate([s.offsets[:-1] + base for s, base in zip(splits, rows)] + [rows[-1:]])
    starts = None if any(s.starts is None for s in splits) else np.concatenate([s.starts for s in splits])
    scales = None if first.scales is None else np.concatenate([s.scales for s in splits])
    return SplitArrays(first.name, np.concatenate([s.hidden for s in splits]),
                       np.concatenate([s.labels for s in splits]), offsets.astype(np.int64), first.layers,
                       np.concatenate([s.sentence_ids for s in splits]), starts, scales, first.storage)
