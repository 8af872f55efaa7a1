"""`extract --granularity subword --special-tokens`: each sentence's rows are the special tokens
before its content, its subwords, then the special tokens after it, as the backbone saw them; their
word_index is -1, their label unscored, and every other key, row and count stays as it was."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cli_output import one_usage_error
from click.testing import CliRunner
from transformers import AutoModel, AutoTokenizer

from layerfuse.cache.layout import entry_key
from layerfuse.cache.manage import entry_status, options_label
from layerfuse.cache.reader import open_entry
from layerfuse.errors import LayerfuseError
from layerfuse.extract.datasets import load_dataset
from layerfuse.extract.estimate import estimate
from layerfuse.extract.masking import IGNORE
from layerfuse.extract.run import ExtractConfig, describe, extract

SPECIAL = dict(granularity="subword", special_tokens=True)


def _run(model_dir, data_dir, root, **kw):
    config = ExtractConfig(model=str(model_dir), dataset=str(data_dir), cache_dir=str(root), **kw)
    return extract(config, progress=False, log=lambda m: None)


def _direct(model_dir, words) -> np.ndarray:
    """[positions, L+1, d]: one sentence alone through HF, every position (specials included)."""
    kwargs = {"add_prefix_space": True} if "roberta" in str(model_dir) else {}
    tok = AutoTokenizer.from_pretrained(model_dir, **kwargs)
    model = AutoModel.from_pretrained(model_dir).eval()
    enc = tok(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        return torch.stack(model(**enc, output_hidden_states=True).hidden_states, dim=2)[0].numpy()


@pytest.mark.parametrize("model_fixture", ["tiny_bert_dir", "tiny_roberta_dir"])
def test_rows_are_the_whole_input_of_the_backbone(request, model_fixture, tiny_conll_dir, tmp_path):
    model_dir = request.getfixturevalue(model_fixture)
    # 64-row units: sentences straddle units, so special rows land on both sides of a unit's edge.
    result = _run(model_dir, tiny_conll_dir, tmp_path, dtype="float32", splits=("dev",), unit_rows=64, **SPECIAL)
    split = open_entry(result.path).split("dev")
    data = load_dataset(str(tiny_conll_dir)).splits["dev"]
    checked = 0
    for i in range(split.n_sentences):
        if len(data[i][0]) > 6:  # long ones are windowed for the tiny models; checked separately
            continue
        np.testing.assert_allclose(split.hidden(sentences=[i]), _direct(model_dir, data[i][0]), rtol=1e-4, atol=1e-5)
        checked += 1
    assert checked >= 5


def test_special_rows_carry_no_word_and_no_label(tiny_bert_dir, tiny_conll_dir, tmp_path):
    plain = open_entry(_run(tiny_bert_dir, tiny_conll_dir, tmp_path, granularity="subword", unit_rows=256).path)
    special = open_entry(_run(tiny_bert_dir, tiny_conll_dir, tmp_path, unit_rows=256, **SPECIAL).path)
    data = load_dataset(str(tiny_conll_dir)).splits
    for name in ("train", "dev", "test"):
        p, s = plain.split(name), special.split(name)
        n = s.n_sentences
        assert n == p.n_sentences == len(data[name])
        assert np.array_equal(np.diff(s.offsets), np.diff(p.offsets) + 2)  # [CLS] and [SEP] once per sentence
        wi, labels = s.group["word_index"][:], s.labels
        firsts, lasts = s.offsets[:-1], s.offsets[1:] - 1
        assert np.all(wi[firsts] == -1) and np.all(wi[lasts] == -1) and np.count_nonzero(wi == -1) == 2 * n
        assert np.all(labels[wi == -1] == IGNORE)
        content = wi != -1
        assert np.array_equal(wi[content], p.group["word_index"][:])
        assert np.array_equal(labels[content], p.labels)
        assert s.words() == p.words() == [ws for ws, _ in data[name]]  # words per sentence unchanged
        assert s.attrs["n_words"] == p.attrs["n_words"]
    # The long train sentence is windowed: [CLS] from its first window, [SEP] from its last, once each.
    train = data["train"]
    long_id = max(range(len(train)), key=lambda i: len(train[i][0]))
    assert special.split("train").attrs["n_windowed_sentences"] >= 1
    rows = special.split("train").hidden(sentences=[long_id], layers=[2]).astype(np.float32)
    assert rows.shape[0] == plain.split("train").hidden(sentences=[long_id], layers=[2]).shape[0] + 2
    assert np.all(np.abs(rows).sum(-1) > 0)  # no row left as the zero fill value


def test_subword_rows_match_the_cache_without_specials(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """One unit per split: the same batches, so the subwords' rows are the same numbers."""
    plain = open_entry(_run(tiny_bert_dir, tiny_conll_dir, tmp_path, granularity="subword", splits=("train",)).path)
    special = open_entry(_run(tiny_bert_dir, tiny_conll_dir, tmp_path, splits=("train",), **SPECIAL).path)
    s = special.split("train")
    content = s.group["word_index"][:] != -1
    np.testing.assert_array_equal(s.hidden()[content], plain.split("train").hidden())


def test_windowed_sentence_keeps_the_specials_of_its_edge_windows(tiny_bert_dir, tmp_path):
    from conftest import write_conll

    words = [w for w in ("the big new paris said " * 12).split()]  # 60 words, one subword each
    d = tmp_path / "data"
    d.mkdir()
    write_conll(d / "train.txt", [(words, ["O"] * len(words))])
    got = open_entry(_run(tiny_bert_dir, d, tmp_path / "c", dtype="float32", **SPECIAL).path).split("train").hidden()
    assert got.shape[0] == 62
    # width = 32 - 2 specials = 30, stride 15: windows start at 0, 15, 30.
    first, last = _direct(tiny_bert_dir, words[:30]), _direct(tiny_bert_dir, words[30:])
    np.testing.assert_allclose(got[:6], first[:6], rtol=1e-4, atol=1e-5)  # [CLS] and the first words
    np.testing.assert_allclose(got[-6:], last[-6:], rtol=1e-4, atol=1e-5)  # the last words and [SEP]


def test_keys_of_every_other_configuration_are_unchanged(tiny_bert_dir, tiny_conll_dir):
    fields = {"model": "m", "model_revision": "r", "dataset_fingerprint": "f", "granularity": "subword",
              "pooling": "none", "dtype": "float16", "max_length": 32, "precision": "fp32"}
    assert entry_key(fields) == entry_key({**fields, "special_tokens": False})
    assert entry_key(fields) != entry_key({**fields, "special_tokens": True})
    for granularity in ("word", "subword"):
        config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), granularity=granularity)
        _, key, attrs = describe(config)
        assert "special_tokens" not in attrs and key == entry_key(attrs)
    _, key, attrs = describe(ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), **SPECIAL))
    assert attrs["special_tokens"] is True and attrs["granularity"] == "subword" and key == entry_key(attrs)


def test_listing_shows_the_option(tiny_bert_dir, tiny_conll_dir, tmp_path):
    path = _run(tiny_bert_dir, tiny_conll_dir, tmp_path, splits=("dev",), **SPECIAL).path
    assert options_label(entry_status(path).fields).startswith("subword+special ")
    plain = _run(tiny_bert_dir, tiny_conll_dir, tmp_path, splits=("dev",), granularity="subword").path
    assert options_label(entry_status(plain).fields).startswith("subword ")


def test_dry_run_counts_the_special_rows(tiny_bert_dir, tiny_conll_dir, tmp_path):
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path),
                           splits=("dev",), **SPECIAL)
    est = estimate(config, rate=False)
    result = extract(config, progress=False, log=lambda m: None)
    assert est.splits[0].rows == result.splits[0].rows
    assert est.splits[0].words == result.splits[0].words


def test_only_with_subword_granularity(tiny_bert_dir, tiny_conll_dir, tmp_path):
    with pytest.raises(LayerfuseError, match="--special-tokens needs --granularity subword"):
        ExtractConfig(special_tokens=True)
    from layerfuse.cli.extract import main

    out = CliRunner().invoke(main, ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir),
                                    "--cache-dir", str(tmp_path), "--special-tokens", "--quiet"])
    assert "--special-tokens needs --granularity subword" in one_usage_error(out)
