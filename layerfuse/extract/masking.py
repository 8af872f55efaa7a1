"""Blocks of subwords and BERT-style masking for masked language modelling.

A split's documents are tokenized without special tokens, concatenated in order (no separator)
and cut into consecutive blocks of ``block_size`` minus the special tokens the tokenizer adds
around one sequence, so a block plus its specials is exactly ``block_size`` long; the last block
may be shorter. Blocks never cross a split: each split is cut on its own.

Masking follows BERT: each content token is chosen for prediction with probability ``p``
(special tokens never); a chosen token becomes the mask token 80% of the time, a random
non-special token 10%, and stays as it is 10%. Extraction draws a split's masks once, from
``split_seed``, so every head (FE) and the FT dev/test evaluation score the same positions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..errors import LayerfuseError
from ..seeds import SEED_LIMIT, is_seed
from .tokenize import AS_TEXT, Tokenized, special_tokens

IGNORE = -100  # label of rows not chosen for prediction (torch's cross-entropy ignore_index)


@dataclass(frozen=True)
class MaskingSpec:
    block_size: int = 128  # subwords per block, special tokens included
    probability: float = 0.15
    seed: int = 0

    def __post_init__(self):
        if not 0.0 < self.probability < 1.0:
            raise LayerfuseError(f"--mlm-probability {self.probability} is not between 0 and 1")
        if self.block_size < 2:
            raise LayerfuseError(f"--block-size {self.block_size} is too small")
        if not is_seed(self.seed):  # a server's job as the CLI's --mask-seed
            raise LayerfuseError(f"--mask-seed {self.seed} is not in 0..{SEED_LIMIT - 1}")


@dataclass(frozen=True)
class MaskVocab:
    """What masking needs of a tokenizer."""

    mask_id: int
    vocab_size: int
    special_ids: tuple[int, ...]

    @classmethod
    def of(cls, tokenizer) -> MaskVocab:
        if tokenizer.mask_token_id is None:
            raise LayerfuseError(f"tokenizer {type(tokenizer).__name__} has no mask token; masked language "
                                  "modelling needs one")
        return cls(mask_id=int(tokenizer.mask_token_id), vocab_size=len(tokenizer),
                   special_ids=tuple(sorted({int(i) for i in tokenizer.all_special_ids})))


@dataclass
class MaskedBlocks:
    ids: np.ndarray  # [n] int64 original content tokens
    inputs: np.ndarray  # [n] int64 what the backbone sees (masked)
    labels: np.ndarray  # [n] int64 original id where chosen for prediction, IGNORE elsewhere
    offsets: np.ndarray  # [blocks + 1] int64: block i is tokens offsets[i]:offsets[i + 1]

    def tokenized(self) -> Tokenized:
        """The masked blocks as the extractor's input: every subword its own word, a block a
        sentence, so the NER machinery (units, resume, checksums) runs unchanged."""
        starts = np.repeat(self.offsets[:-1], np.diff(self.offsets))
        return Tokenized(ids=self.inputs, sub_offsets=self.offsets, word_of_sub=np.arange(len(self.inputs)) - starts,
                         word_offsets=self.offsets, n_empty_words=0)


def content_size(tokenizer, block_size: int) -> int:
    """Content tokens per block: block_size minus the special tokens added around a sequence."""
    prefix, suffix = special_tokens(tokenizer)
    size = block_size - len(prefix) - len(suffix)
    if size < 1:
        raise LayerfuseError(f"--block-size {block_size} leaves no room for content next to the "
                              f"{len(prefix) + len(suffix)} special tokens")
    return size


def make_blocks(tokenizer, documents: list[str], *, block_size: int,
                batch: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """(content ids int64 [n], offsets int64 [blocks + 1]) of the documents, concatenated."""
    size = content_size(tokenizer, block_size)
    parts = []
    for start in range(0, len(documents), batch):
        enc = tokenizer(list(documents[start : start + batch]), **AS_TEXT,  # a "<mask>" in a text is text
                        return_attention_mask=False, return_token_type_ids=False)
        parts.extend(np.asarray(ids, dtype=np.int64) for ids in enc["input_ids"])
    ids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    offsets = np.append(np.arange(0, len(ids), size, dtype=np.int64), len(ids))
    return ids, offsets


def mask_tokens(ids: np.ndarray, *, tokenizer_info: MaskVocab, probability: float,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(inputs int64 [n], labels int64 [n]); draws from ``rng`` in a fixed order, so one seed gives
    one set of masks."""
    ids = np.asarray(ids, dtype=np.int64)
    specials = np.asarray(tokenizer_info.special_ids, dtype=np.int64)
    chosen = (rng.random(len(ids)) < probability) & ~np.isin(ids, specials)
    kind = rng.random(len(ids))
    to_mask = chosen & (kind < 0.8)
    to_random = chosen & (kind >= 0.8) & (kind < 0.9)
    pool = np.setdiff1d(np.arange(tokenizer_info.vocab_size, dtype=np.int64), specials)  # never a special
    inputs = ids.copy()
    inputs[to_mask] = tokenizer_info.mask_id
    inputs[to_random] = pool[rng.integers(0, len(pool), size=int(to_random.sum()))]
    return inputs, np.where(chosen, ids, IGNORE)


def split_seed(spec: MaskingSpec, split: str) -> int:
    """The seed of a split's fixed masks: the spec's seed and the split's name, hashed, so the
    splits' masks are independent and stable across processes (unlike hash())."""
    digest = hashlib.sha256(f"layerfuse-mlm:{spec.seed}:{split}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def masked_split(tokenizer, documents: list[str], *, spec: MaskingSpec, split: str,
                 source: str = "the documents") -> MaskedBlocks:
    """A split's blocks with their fixed masks (what extraction stores; FT's dev and test). A split that
    tokenizes to nothing is refused here: the free-space check makes every split's blocks before the entry
    exists, so nothing is written (refused at its turn, it left an entry no rerun could finish)."""
    ids, offsets = make_blocks(tokenizer, documents, block_size=spec.block_size)
    if not len(ids):
        raise LayerfuseError(f"split {split!r} of {source} tokenizes to nothing")
    inputs, labels = mask_tokens(ids, tokenizer_info=MaskVocab.of(tokenizer), probability=spec.probability,
                                 rng=np.random.default_rng(split_seed(spec, split)))
    return MaskedBlocks(ids=ids, inputs=inputs, labels=labels, offsets=offsets)
