"""MLM blocks and masking: 15% chosen, 80/10/10, specials never touched, seeded, blocks per split."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoTokenizer

from layerfuse.errors import LayerfuseError
from layerfuse.extract.masking import (
    IGNORE,
    MaskingSpec,
    MaskVocab,
    make_blocks,
    mask_tokens,
    masked_split,
    split_seed,
)

VOCAB = MaskVocab(mask_id=4, vocab_size=1000, special_ids=(0, 1, 2, 3, 4))


def _sample(n=400_000, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB.vocab_size, size=n)  # specials included, about 0.5%
    return ids, *mask_tokens(ids, tokenizer_info=VOCAB, probability=0.15, rng=np.random.default_rng(1))


def test_masking_statistics():
    ids, inputs, labels = _sample()
    content = ~np.isin(ids, VOCAB.special_ids)
    chosen = labels != IGNORE
    assert abs(chosen[content].mean() - 0.15) < 0.003
    np.testing.assert_array_equal(labels[chosen], ids[chosen])
    masked = inputs[chosen] == VOCAB.mask_id
    unchanged = inputs[chosen] == ids[chosen]
    replaced = ~masked & ~unchanged
    assert abs(masked.mean() - 0.8) < 0.01
    assert abs(replaced.mean() - 0.1) < 0.01  # a random token equals the original 1 time in 995
    assert abs(unchanged.mean() - 0.1) < 0.01
    np.testing.assert_array_equal(inputs[~chosen], ids[~chosen])  # rows not chosen are untouched


def test_specials_never_masked_nor_drawn():
    ids, inputs, labels = _sample()
    special = np.isin(ids, VOCAB.special_ids)
    assert special.sum() > 1000
    assert np.all(labels[special] == IGNORE) and np.array_equal(inputs[special], ids[special])
    chosen = labels != IGNORE
    drawn = inputs[chosen & (inputs != VOCAB.mask_id)]
    assert not np.isin(drawn, VOCAB.special_ids).any()


def test_seeding():
    ids = np.random.default_rng(0).integers(5, 1000, size=5000)

    def run(seed):
        return mask_tokens(ids, tokenizer_info=VOCAB, probability=0.15, rng=np.random.default_rng(seed))

    for a, b in zip(run(3), run(3)):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(run(3)[1], run(4)[1])
    spec = MaskingSpec(seed=0)
    assert split_seed(spec, "dev") == split_seed(MaskingSpec(seed=0, block_size=64), "dev")
    assert len({split_seed(spec, "train"), split_seed(spec, "dev"), split_seed(MaskingSpec(seed=1), "dev")}) == 3


@pytest.fixture(scope="module")
def bert_tokenizer(tiny_bert_dir):
    return AutoTokenizer.from_pretrained(tiny_bert_dir)


DOCS = {
    "train": ["alice met bob in paris today .", "the big new acme said", "carol visited london with dave"] * 7,
    "dev": ["erin and frank from rome", "grace said the new hooli"],
}


def test_blocks_respect_block_size_and_keep_every_token(bert_tokenizer):
    ids, offsets = make_blocks(bert_tokenizer, DOCS["train"], block_size=10)  # [CLS] + 8 + [SEP]
    sizes = np.diff(offsets)
    assert offsets[0] == 0 and offsets[-1] == len(ids)
    assert np.all(sizes[:-1] == 8) and 1 <= sizes[-1] <= 8
    concatenated = [t for d in DOCS["train"] for t in bert_tokenizer(d, add_special_tokens=False)["input_ids"]]
    np.testing.assert_array_equal(ids, concatenated)  # documents in order, no separator
    assert not np.isin(ids, [bert_tokenizer.cls_token_id, bert_tokenizer.sep_token_id]).any()
    with pytest.raises(LayerfuseError, match="--block-size 2"):
        make_blocks(bert_tokenizer, DOCS["train"], block_size=2)


def test_blocks_never_cross_splits(bert_tokenizer):
    """Each split is cut on its own: dev's first block starts with dev's first token, whatever the
    length of train (train's last block is short rather than running into dev)."""
    spec = MaskingSpec(block_size=10)
    train = masked_split(bert_tokenizer, DOCS["train"], spec=spec, split="train")
    dev = masked_split(bert_tokenizer, DOCS["dev"], spec=spec, split="dev")
    dev_ids = [t for d in DOCS["dev"] for t in bert_tokenizer(d, add_special_tokens=False)["input_ids"]]
    np.testing.assert_array_equal(dev.ids, dev_ids)
    assert train.offsets[-1] == len(train.ids) and len(train.ids) % 8 != 0  # a short last block stays short
    tok = dev.tokenized()
    np.testing.assert_array_equal(tok.ids, dev.inputs)
    for i in range(len(dev.offsets) - 1):
        np.testing.assert_array_equal(tok.word_of_sub[dev.offsets[i]:dev.offsets[i + 1]],
                                      np.arange(dev.offsets[i + 1] - dev.offsets[i]))


def test_mask_vocab_of_a_tokenizer(bert_tokenizer):
    vocab = MaskVocab.of(bert_tokenizer)
    assert vocab.mask_id == bert_tokenizer.mask_token_id == 4
    assert set(vocab.special_ids) == {0, 1, 2, 3, 4} and vocab.vocab_size == len(bert_tokenizer)
    again = masked_split(bert_tokenizer, DOCS["train"], spec=MaskingSpec(block_size=10, probability=0.5), split="train")
    once = masked_split(bert_tokenizer, DOCS["train"], spec=MaskingSpec(block_size=10, probability=0.5), split="train")
    np.testing.assert_array_equal(again.inputs, once.inputs)
    assert (again.labels != IGNORE).any()


def test_bad_spec():
    with pytest.raises(LayerfuseError, match="--mlm-probability 1.5"):
        MaskingSpec(probability=1.5)
