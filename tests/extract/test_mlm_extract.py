"""`extract --task mlm` on tiny random encoders: the entry holds the masked blocks (rows = content
tokens), int32 labels and input ids, the LM weights, the MLM attributes; rows equal a direct
forward pass of [CLS] block [SEP]; the key follows the masking spec; NER is unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import zarr
from click.testing import CliRunner
from transformers import AutoModel, AutoTokenizer

from layerfuse.cache.reader import open_entry
from layerfuse.errors import LayerfuseError
from layerfuse.extract.lm_weights import has_lm_head, lm_head_weights
from layerfuse.extract.masking import IGNORE, MaskingSpec, masked_split
from layerfuse.extract.run import ExtractConfig, describe, extract
from layerfuse.extract.text import load_text


def write_corpus(d: Path, *, docs: int = 60, seed: int = 5) -> Path:
    """train/dev/test.txt of documents over the tiny vocabulary (a few sentences each)."""
    from conftest import make_sentences

    d.mkdir(parents=True, exist_ok=True)
    for split, n, s in (("train", docs, seed), ("dev", 8, seed + 1), ("test", 8, seed + 2)):
        sentences = make_sentences(3 * n, seed=s)
        text = "\n\n".join(" . ".join(" ".join(w) for w, _ in sentences[3 * i: 3 * i + 3]) + " ." for i in range(n))
        (d / f"{split}.txt").write_text(text + "\n")
    return d


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("mlm_corpus") / "corpus")


def _run(model_dir, data_dir, root, **kw):
    config = ExtractConfig(model=str(model_dir), dataset=str(data_dir), cache_dir=str(root), unit_rows=256,
                           task="mlm", block_size=16, **kw)
    return extract(config, progress=False, log=lambda m: None)


def test_mlm_entry_holds_masked_blocks_and_lm_weights(tiny_bert_dir, corpus_dir, tmp_path):
    result = _run(tiny_bert_dir, corpus_dir, tmp_path, dtype="float32")
    entry = open_entry(result.path)
    meta = entry.meta
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = AutoModel.from_pretrained(tiny_bert_dir).eval()
    assert entry.task == "mlm" and entry.splits == ["train", "dev", "test"]  # lm is not a split
    assert meta["granularity"] == "subword" and meta["pooling"] == "none"
    assert (meta["block_size"], meta["mask_seed"], meta["mlm_probability"]) == (16, 0, 0.15)
    assert meta["vocab_size"] == model.config.vocab_size and meta["mask_token_id"] == tok.mask_token_id
    assert set(meta["special_ids"]) == {0, 1, 2, 3, 4} and meta["label_names"] == meta["entity_types"] == []
    assert meta["lm_head"] == "none" and meta["hidden_act"] == "gelu" and meta["layer_norm_eps"] == 1e-12
    lm = entry.lm()
    assert set(lm) == {"embeddings"} and lm["embeddings"].dtype == np.float32
    np.testing.assert_array_equal(lm["embeddings"], model.get_input_embeddings().weight.detach().numpy())

    corpus = load_text(str(corpus_dir))
    for name in ("train", "dev"):
        split = entry.split(name)
        g = split.group
        want = masked_split(tok, corpus.splits[name], spec=MaskingSpec(block_size=16), split=name)
        assert g["labels"].dtype == np.int32 and g["input_ids"].dtype == np.int32
        np.testing.assert_array_equal(split.labels, want.labels)
        np.testing.assert_array_equal(split.input_ids, want.inputs)
        np.testing.assert_array_equal(split.offsets, want.offsets)
        assert np.all(np.diff(split.offsets)[:-1] == 14)  # 16 minus [CLS] and [SEP]
        chosen = split.labels != IGNORE
        assert 0.08 < chosen.mean() < 0.22 and split.attrs["n_masked"] == int(chosen.sum())
        np.testing.assert_array_equal(split.labels[chosen], want.ids[chosen])
        assert list(g["words"][:20]) == tok.convert_ids_to_tokens(want.inputs[:20].tolist())
        assert list(g["word_index"][: split.offsets[2]]) == list(range(14)) * 2
        assert result.splits[["train", "dev", "test"].index(name)].words == split.n_rows
    dev = entry.split("dev")
    for i in (0, 3):
        lo, hi = dev.offsets[i], dev.offsets[i + 1]
        ids = torch.tensor([[tok.cls_token_id, *dev.input_ids[lo:hi].tolist(), tok.sep_token_id]])
        with torch.no_grad():
            hs = torch.stack(model(input_ids=ids, output_hidden_states=True).hidden_states, dim=2)[0, 1:-1]
        np.testing.assert_allclose(dev.hidden(sentences=[i]), hs.numpy(), rtol=1e-4, atol=1e-5)

    again = _run(tiny_bert_dir, corpus_dir, tmp_path, dtype="float32")
    assert again.path == result.path and all(s.reused for s in again.splits)


def test_key_follows_corpus_and_masking_spec(tiny_bert_dir, corpus_dir, tmp_path):
    def key(**kw):
        config = ExtractConfig(model=str(tiny_bert_dir), cache_dir=str(tmp_path), task="mlm",
                               **{"block_size": 16, "dataset": str(corpus_dir), **kw})
        return describe(config)[1]

    base = key()
    assert key() == base
    assert len({base, key(mask_seed=1), key(block_size=12), key(mlm_probability=0.2)}) == 4
    other = write_corpus(tmp_path / "other", docs=61)
    assert key(dataset=str(other)) != base
    ner = ExtractConfig(model=str(tiny_bert_dir), dataset="wnut16", cache_dir=str(tmp_path))
    assert "task" not in describe(ner)[2]  # NER attributes (and keys) as before


def test_checkpoint_with_an_mlm_head(tiny_bert_dir, corpus_dir, tmp_path):
    """A BertForMaskedLM checkpoint: lm_head 'checkpoint' and the head's arrays as stored."""
    import shutil

    from transformers import BertConfig, BertForMaskedLM

    d = tmp_path / "bert_mlm"
    d.mkdir()
    for f in tiny_bert_dir.iterdir():
        if "token" in f.name or f.name == "vocab.txt":
            shutil.copy(f, d / f.name)
    config = BertConfig.from_pretrained(tiny_bert_dir)
    torch.manual_seed(1)
    model = BertForMaskedLM(config)
    with torch.no_grad():  # make the head distinguishable from its initialisation
        model.cls.predictions.bias.uniform_(-1, 1)
        model.cls.predictions.transform.LayerNorm.weight.uniform_(0.5, 1.5)
    model.save_pretrained(d)
    assert has_lm_head(str(d))
    entry = open_entry(_run(d, corpus_dir, tmp_path / "c", splits=("dev",)).path)
    assert entry.meta["lm_head"] == "checkpoint"
    lm = entry.lm()
    p = model.cls.predictions
    expected = {"embeddings": model.bert.embeddings.word_embeddings.weight, "dense_weight": p.transform.dense.weight,
                "dense_bias": p.transform.dense.bias, "norm_weight": p.transform.LayerNorm.weight,
                "norm_bias": p.transform.LayerNorm.bias, "decoder_bias": p.bias}
    assert set(lm) == set(expected)
    for name, tensor in expected.items():
        np.testing.assert_array_equal(lm[name], tensor.detach().numpy(), err_msg=name)


def test_roberta_style_head_names(tmp_path):
    from transformers import RobertaConfig, RobertaForMaskedLM

    config = RobertaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=20)
    torch.manual_seed(0)
    model = RobertaForMaskedLM(config)
    model.save_pretrained(tmp_path)
    got = lm_head_weights(str(tmp_path))
    np.testing.assert_array_equal(got["dense_weight"], model.lm_head.dense.weight.detach().numpy())
    np.testing.assert_array_equal(got["norm_bias"], model.lm_head.layer_norm.bias.detach().numpy())
    np.testing.assert_array_equal(got["decoder_bias"], model.lm_head.bias.detach().numpy())
    np.testing.assert_array_equal(got["embeddings"], model.roberta.embeddings.word_embeddings.weight.detach().numpy())
    assert set(lm_head_weights(str(tmp_path), embeddings=False)) == {"dense_weight", "dense_bias", "norm_weight",
                                                                     "norm_bias", "decoder_bias"}


def test_options_are_checked(tiny_bert_dir, corpus_dir, tmp_path):
    with pytest.raises(LayerfuseError, match="need --task mlm"):
        ExtractConfig(dataset=str(corpus_dir), block_size=64)
    with pytest.raises(LayerfuseError, match="--task 'lm'"):
        ExtractConfig(task="lm")
    assert ExtractConfig(task="mlm").dataset == "wiki-offline" and ExtractConfig().dataset == "wnut16"
    with pytest.raises(LayerfuseError, match="--block-size 64 is longer"):
        extract(ExtractConfig(model=str(tiny_bert_dir), dataset=str(corpus_dir), cache_dir=str(tmp_path), task="mlm",
                              block_size=64), progress=False)
    with pytest.raises(LayerfuseError, match="no train text"):
        _run(tiny_bert_dir, tmp_path, tmp_path / "c")


def test_cli_prints_blocks_and_tokens(tiny_bert_dir, corpus_dir, tmp_path):
    from layerfuse.cli.extract import main

    args = ["--task", "mlm", "--model", str(tiny_bert_dir), "--dataset", str(corpus_dir), "--block-size", "16",
            "--cache-dir", str(tmp_path), "--splits", "dev", "--quiet"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    assert "blocks" in out.output and "tokens/s" in out.output
    path = out.output.split("cached: ")[1].split()[0]
    assert zarr.open_group(path, mode="r").attrs["task"] == "mlm"
    bad = CliRunner().invoke(main, ["--block-size", "64", "--dataset", str(corpus_dir)])
    assert bad.exit_code != 0 and "need --task mlm" in bad.output
