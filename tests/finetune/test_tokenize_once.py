"""FT tokenizes a split once: a batch is a slice of the split's tokens, equal to tokenizing the
batch's sentences anew, and no batch calls the tokenizer again."""

from __future__ import annotations

import numpy as np
from transformers import AutoTokenizer

from layerfuse.extract.tokenize import tokenize_words


def test_a_slice_of_the_tokens_equals_tokenizing_the_slice(tiny_bert_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    sentences = [["Alice", "met", "Bob"], ["in", "Paris", "today", "\u200b"], ["ok"], ["Carolson", "of", "Acme"]]
    whole = tokenize_words(tokenizer, sentences)
    for positions in ([2, 0], [3], [1, 3, 0, 2], []):
        part, fresh = whole.select(positions), tokenize_words(tokenizer, [sentences[p] for p in positions])
        for name in ("ids", "sub_offsets", "word_of_sub", "word_offsets"):
            assert np.array_equal(getattr(part, name), getattr(fresh, name)), (positions, name)


def test_ft_batches_tokenize_the_split_once(tiny_cache, monkeypatch):
    from layerfuse.cache.reader import open_entry
    from layerfuse.finetune.data import live_data
    from layerfuse.finetune.live import load_live_backbone
    from layerfuse.training import TrainConfig, train_head

    entry = open_entry(tiny_cache)
    backbone = load_live_backbone(entry.meta, device="cpu")
    data = live_data(entry, backbone, layers=range(1, entry.num_layers + 1))
    calls = []
    original = backbone.tokenizer.__class__.__call__

    def counted(self, *args, **kwargs):
        calls.append(len(args[0]) if args else 0)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(backbone.tokenizer.__class__, "__call__", counted)
    config = TrainConfig(fusion="concat", shots=4, epochs=3, seed=0, lr=1e-3, mode="ft", batch_size=4,
                         dev_sentences=8)
    result = train_head(config, data)
    assert result.total_steps >= 6
    # the sample once, dev once, test once (and re-tokenized words that came out empty): not per batch
    assert len(calls) <= 3 + 2, calls
