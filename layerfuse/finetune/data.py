"""FT mode: the same heads on live hidden states of a backbone being fine-tuned end to end.

`live_data` builds the `HeadData` that FE builds, its splits live (`states.LiveSplit`: the words,
tags and sentence ids come from the cache entry, so the few-shot sample, the dev set and the
evaluation are the very ones of FE), with the backbone that `train_head` trains with the head.
"""

from __future__ import annotations

import numpy as np

from ..errors import LayerfuseError
from ..tasks import task_of
from ..training.data import HeadData
from .states import LiveSplit


def check_live(entry) -> None:
    """FT tags a word-level entry's words (an MLM entry's blocks): refused before its backbone is loaded."""
    if not task_of(entry.meta).masks_inputs and entry.meta.get("granularity") != "word":
        raise LayerfuseError(f"FT mode needs a word-level cache; {entry.path} is {entry.meta.get('granularity')}")


def live_data(entry, backbone, *, layers) -> HeadData:
    """Words and tags of every split of a cache entry, around a live backbone (MLM entries: their
    blocks of token ids, `layerfuse.finetune.mlm`)."""
    for name in ("train", "dev"):
        if name not in entry.splits:
            raise LayerfuseError(f"{entry.path} has no finished {name!r} split; extract it first")
    n_train = entry.split("train").n_sentences
    if task_of(entry.meta).masks_inputs:
        from .mlm import live_blocks

        return HeadData(meta=dict(entry.meta), path=entry.path, n_train_total=n_train, backbone=backbone,
                        **live_blocks(entry, backbone, layers=layers))
    check_live(entry)
    layers = tuple(int(x) for x in layers)

    def split(name):
        s = entry.split(name)
        return LiveSplit(name, s.labels.astype(np.int64), s.offsets.astype(np.int64), layers,
                         np.arange(s.n_sentences), backbone, words=s.words())

    return HeadData(meta=dict(entry.meta), path=entry.path, train=split("train"), n_train_total=n_train,
                    dev=split("dev"), test=split("test") if "test" in entry.splits else None, backbone=backbone)
