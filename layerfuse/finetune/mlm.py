"""FT mode for masked language modelling: the blocks of an MLM cache entry around a live backbone.

The entry already holds every block as token ids: the original token is the label where one was
chosen for prediction and the stored input elsewhere, so no corpus is re-read or re-tokenized.
Dev and test keep the entry's fixed masks (`masked_split`'s, the ones FE scores), so FE and FT
perplexities are measured on the very same positions; train draws fresh masks every epoch from
``np.random.default_rng([seed, epoch])``, as pretraining does.
"""

from __future__ import annotations

import numpy as np

from ..errors import LayerfuseError
from ..training.arrays import IGNORE
from .states import LiveSplit


def live_blocks(entry, backbone, *, layers) -> dict:
    """The `HeadData` fields of an MLM entry: its splits as `LiveSplit` blocks, and its lm/* head init."""
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
        return LiveSplit(name, labels, s.offsets.astype(np.int64), layers, np.arange(s.n_sentences), backbone,
                         ids=ids, inputs=inputs, remask=remask)

    probability = float(entry.meta["mlm_probability"])
    lm = {k: v for k, v in entry.lm().items() if k != "embeddings"}  # FT decodes with the backbone's own
    return dict(train=split("train", (vocab, probability)), dev=split("dev", None),
                test=split("test", None) if "test" in entry.splits else None, lm=lm)
