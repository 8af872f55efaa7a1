"""Encoders of RoBERTa's kin outside a list of names (data2vec-text here): their positions start after
the padding index, so windows are 2 + pad shorter than the position table (a long sentence indexed
past it, in a traceback), and a byte-level BPE tokenizer saved without ``add_prefix_space`` still marks
every pre-split word as following a space (each was encoded as if it opened the text, in silence)."""

from __future__ import annotations

import json
import shutil

import pytest

from layerfuse.cache.reader import open_entry
from layerfuse.extract.models import load_tokenizer, model_info
from layerfuse.extract.run import ExtractConfig, extract


@pytest.fixture(scope="module")
def data2vec_dir(tiny_roberta_dir, tmp_path_factory):
    import torch
    from transformers import Data2VecTextConfig, Data2VecTextModel

    folder = tmp_path_factory.mktemp("data2vec")
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "special_tokens_map.json"):
        if (tiny_roberta_dir / name).exists():
            shutil.copy(tiny_roberta_dir / name, folder / name)
    state = json.loads((folder / "tokenizer.json").read_text())
    state["pre_tokenizer"]["add_prefix_space"] = False  # as facebook/data2vec-text-base saves it
    (folder / "tokenizer.json").write_text(json.dumps(state))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                              "bos_token": "<s>", "eos_token": "</s>",
                                                              "pad_token": "<pad>", "unk_token": "<unk>"}))
    config = Data2VecTextConfig(vocab_size=320, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=34, pad_token_id=1)
    torch.manual_seed(0)
    Data2VecTextModel(config).save_pretrained(folder)
    return folder


def test_positions_after_the_padding_index_shorten_the_window(data2vec_dir, tiny_bert_dir, tiny_roberta_dir):
    from transformers import AutoConfig

    assert model_info(str(data2vec_dir)).max_length == 34 - 1 - 1
    assert model_info(str(tiny_roberta_dir)).max_length == 34 - 1 - 1
    bert = AutoConfig.from_pretrained(tiny_bert_dir).max_position_embeddings
    assert model_info(str(tiny_bert_dir)).max_length == bert  # BERT counts positions from 0


def test_every_pre_split_word_is_marked_as_following_a_space(data2vec_dir):
    tok = load_tokenizer(model_info(str(data2vec_dir)))
    ids = tok(["paris", "is", "big"], is_split_into_words=True, add_special_tokens=False)["input_ids"]
    running = tok(" paris is big", add_special_tokens=False)["input_ids"]
    assert ids == running and all(t.startswith("Ġ") for t in tok.convert_ids_to_tokens(ids) if t in ("Ġis", "Ġbig"))


def test_a_sentence_longer_than_the_positions_is_windowed(data2vec_dir, tmp_path):
    data = tmp_path / "long"
    data.mkdir()
    words = ["paris", "is", "big", "and", "rome", "is", "old"] * 8  # 56 words, past the 32 positions
    (data / "train.txt").write_text("\n".join(f"{w} O" for w in words) + "\n\nrome B-LOC\n\n")
    config = ExtractConfig(model=str(data2vec_dir), dataset=str(data), cache_dir=str(tmp_path / "cache"),
                           unit_rows=64, splits=("train",))
    train = open_entry(extract(config, progress=False, log=lambda m: None).path).split("train")
    assert train.n_rows == len(words) + 1 and train.attrs["n_windowed_sentences"] == 1
