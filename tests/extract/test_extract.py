"""Stage one end to end on tiny random encoders: cached vectors equal a direct forward pass,
every word keeps a row, reruns reuse the entry, and the reader returns what was written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from layerfuse.cache.reader import open_entry
from layerfuse.errors import LayerfuseError
from layerfuse.extract.datasets import load_dataset
from layerfuse.extract.run import ExtractConfig, extract


def _run(model_dir, data_dir, root, **kw):
    kw.setdefault("unit_rows", 256)
    config = ExtractConfig(model=str(model_dir), dataset=str(data_dir), cache_dir=str(root), **kw)
    return extract(config, progress=False, log=lambda m: None)


def _direct(model_dir, words, *, pooling, granularity="word"):
    """Reference: one sentence alone through HF with output_hidden_states, pooled per word."""
    kwargs = {"add_prefix_space": True} if "roberta" in str(model_dir) else {}
    tok = AutoTokenizer.from_pretrained(model_dir, **kwargs)
    model = AutoModel.from_pretrained(model_dir).eval()
    enc = tok(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        hs = torch.stack(model(**enc, output_hidden_states=True).hidden_states, dim=2)[0]  # [T, L+1, d]
    wids = enc.word_ids(0)
    if granularity == "subword":
        return hs[[i for i, w in enumerate(wids) if w is not None]].numpy()
    rows = []
    for w in range(len(words)):
        pos = [i for i, x in enumerate(wids) if x == w]
        sel = {"first": pos[:1], "last": pos[-1:], "mean": pos}[pooling]
        rows.append(hs[sel].mean(0))
    return torch.stack(rows).numpy()


@pytest.mark.parametrize("model_fixture", ["tiny_bert_dir", "tiny_roberta_dir"])
@pytest.mark.parametrize("pooling", ["first", "mean", "last"])
def test_cached_vectors_equal_direct_forward(request, model_fixture, pooling, tiny_conll_dir, tmp_path):
    model_dir = request.getfixturevalue(model_fixture)
    result = _run(model_dir, tiny_conll_dir, tmp_path, pooling=pooling, dtype="float32", splits=("dev",))
    split = open_entry(result.path).split("dev")
    data = load_dataset(str(tiny_conll_dir)).splits["dev"]
    checked = 0
    for i in range(split.n_sentences):
        words = data[i][0]
        if len(words) > 8:  # long ones are windowed for the tiny models; checked separately
            continue
        got = split.hidden(sentences=[i])
        want = _direct(model_dir, words, pooling=pooling)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        checked += 1
    assert checked >= 10


def test_subword_granularity_equals_direct_forward(tiny_bert_dir, tiny_conll_dir, tmp_path):
    result = _run(tiny_bert_dir, tiny_conll_dir, tmp_path, granularity="subword", dtype="float32", splits=("dev",))
    split = open_entry(result.path).split("dev")
    data = load_dataset(str(tiny_conll_dir)).splits["dev"]
    for i in range(5):
        if len(data[i][0]) <= 6:
            np.testing.assert_allclose(split.hidden(sentences=[i]),
                                       _direct(tiny_bert_dir, data[i][0], pooling="first", granularity="subword"),
                                       rtol=1e-4, atol=1e-5)
    assert "word_index" in split.group


def test_every_word_keeps_a_row(tiny_bert_dir, tiny_conll_dir, tmp_path):
    result = _run(tiny_bert_dir, tiny_conll_dir, tmp_path, splits=("train",))
    train = result.splits[0]
    data = load_dataset(str(tiny_conll_dir)).splits["train"]
    assert train.rows == train.words == sum(len(w) for w, _ in data)
    assert train.empty_words == 1  # the zero-width word
    assert train.windowed_sentences >= 1  # the long sentence is longer than 32 positions
    split = open_entry(result.path).split("train")
    long_id = max(range(len(data)), key=lambda i: len(data[i][0]))
    vectors = split.hidden(sentences=[long_id], layers=[2]).astype(np.float32)
    assert vectors.shape[0] == len(data[long_id][0]) > 30
    assert np.all(np.abs(vectors).sum(-1) > 0)  # no word left as the zero fill value
    zw = split.hidden(sentences=[7], layers=[2]).astype(np.float32)  # "Alice \u200b met Bob"
    assert zw.shape[0] == 4 and np.abs(zw[1]).sum() > 0
    assert split.words([7])[0][1] == "\u200b"


def test_windowed_words_match_a_direct_forward_of_their_window(tiny_bert_dir, tmp_path):
    """A word in the middle of a long sentence gets the vector of the window it sits in."""
    from conftest import write_conll

    words = [w for w in ("the big new paris said " * 12).split()]  # 60 words, one subword each
    d = tmp_path / "data"
    d.mkdir()
    write_conll(d / "train.txt", [(words, ["O"] * len(words))])
    result = _run(tiny_bert_dir, d, tmp_path / "c", dtype="float32")
    got = open_entry(result.path).split("train").hidden()
    assert got.shape[0] == 60
    # width = 32 - 2 specials = 30, stride 15: windows start at 0, 15, 30; word 0 from the first.
    np.testing.assert_allclose(got[:5], _direct(tiny_bert_dir, words[:30], pooling="first")[:5], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[-5:], _direct(tiny_bert_dir, words[30:], pooling="first")[-5:], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_a_long_sentence_across_a_unit_boundary(tiny_bert_dir, tmp_path, pooling):
    """A windowed sentence whose rows straddle two units: a window with no word in one of them gave
    that unit an empty batch, and extraction died in `aminmax` (a 40-line traceback, every rerun)."""
    from conftest import write_conll

    long = [w for w in ("the big new paris said " * 20).split()]  # 100 words: windows of 30
    sentences = [(["paris"], ["O"])] * 240 + [(long, ["O"] * len(long))] + [(["the"], ["O"])] * 20
    d = tmp_path / "data"
    d.mkdir()
    write_conll(d / "train.txt", sentences)
    units = {rows: _run(tiny_bert_dir, d, tmp_path / f"c{rows}", dtype="float32", pooling=pooling, unit_rows=rows,
                        token_budget=32)  # one window a batch, as a 512-position model on a CPU has it
             for rows in (256, 1024)}  # rows 240..339 cross 256 in the first; one unit in the second
    small, whole = (open_entry(units[rows].path).split("train").hidden() for rows in (256, 1024))
    assert small.shape[0] == whole.shape[0] == 360
    np.testing.assert_allclose(small, whole, rtol=1e-5, atol=1e-6)


def test_second_run_reuses_and_changed_option_makes_new_entry(tiny_bert_dir, tiny_conll_dir, tmp_path):
    first = _run(tiny_bert_dir, tiny_conll_dir, tmp_path)
    again = _run(tiny_bert_dir, tiny_conll_dir, tmp_path)
    assert again.path == first.path and all(s.reused for s in again.splits)
    other = _run(tiny_bert_dir, tiny_conll_dir, tmp_path, pooling="mean")
    assert other.path != first.path and not any(s.reused for s in other.splits)
    one_split = _run(tiny_bert_dir, tiny_conll_dir, tmp_path, splits=("dev",))
    assert one_split.path == first.path and one_split.splits[0].reused


def test_reader_api(tiny_cache, tiny_conll_dir):
    entry = open_entry(tiny_cache)
    data = load_dataset(str(tiny_conll_dir))
    assert entry.splits == ["train", "dev", "test"]
    assert entry.label_names == data.label_names and entry.num_layers == 2 and entry.dim == 32
    dev = entry.split("dev")
    assert dev.n_sentences == 40 and dev.offsets[0] == 0 and dev.offsets[-1] == dev.n_rows
    assert [entry.label_names[i] for i in dev.labels[: len(data.splits["dev"][0][1])]] == data.splits["dev"][0][1]
    assert dev.words([0, 3]) == [data.splits["dev"][0][0], data.splits["dev"][3][0]]
    full = dev.hidden()
    assert full.shape == (dev.n_rows, 3, 32) and full.dtype == np.float16
    ids = [5, 1, 30]
    sub = dev.hidden(sentences=ids, layers=[2, 0])
    rows = np.concatenate([np.arange(dev.offsets[i], dev.offsets[i + 1]) for i in ids])
    np.testing.assert_array_equal(sub, full[rows][:, [2, 0]])
    t = dev.hidden(sentences=ids, layers=[1], as_torch=True, dtype=np.float32)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
    with pytest.raises(LayerfuseError, match="out of range"):
        dev.hidden(layers=[3])
    with pytest.raises(LayerfuseError, match="sentence ids out of range"):
        dev.hidden(sentences=[40])
    with pytest.raises(LayerfuseError, match="split 'nope'"):
        entry.split("nope")


def test_bfloat16_storage(tiny_bert_dir, tiny_conll_dir, tmp_path):
    ref = open_entry(_run(tiny_bert_dir, tiny_conll_dir, tmp_path / "a", dtype="float32", splits=("dev",)).path)
    bf = open_entry(_run(tiny_bert_dir, tiny_conll_dir, tmp_path / "b", dtype="bfloat16", splits=("dev",)).path)
    want = torch.from_numpy(ref.split("dev").hidden()).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(bf.split("dev").hidden(), want)


def test_layer_read_touches_only_that_layer(tiny_bert_dir, tiny_conll_dir, tmp_path):
    from zarr.storage import LocalStore

    class CountingStore(LocalStore):
        read = 0

        async def get(self, key, prototype, byte_range=None):
            buf = await super().get(key, prototype, byte_range)
            if buf is not None and "/hidden/c" in "/" + key:
                CountingStore.read += len(buf)
            return buf

    result = _run(tiny_bert_dir, tiny_conll_dir, tmp_path, splits=("train",))
    entry = open_entry(CountingStore(result.path, read_only=True))
    split = entry.split("train")
    CountingStore.read = 0
    split.hidden(layers=[1])
    one_layer = split.n_rows * 32 * 2
    assert one_layer <= CountingStore.read < 1.5 * one_layer  # padding of the last chunk + shard indexes


def test_bytes_per_word_near_ideal(tiny_cache):
    from layerfuse.cache.manage import bytes_on_disk

    entry = open_entry(tiny_cache)
    rows = sum(entry.split(s).n_rows for s in entry.splits)
    hidden_bytes = sum(bytes_on_disk(f"{tiny_cache}/{s}/hidden") for s in entry.splits)
    assert hidden_bytes / rows / (3 * 32 * 2) < 1.3  # tiny splits: one padded chunk weighs a lot


def test_offline_hub_name_is_one_clear_error(tiny_conll_dir, tmp_path):
    with pytest.raises(LayerfuseError, match="hub is unreachable"):
        _run("no-such-org/no-such-model", tiny_conll_dir, tmp_path)


def test_log_names_the_types_unseen_in_train(tiny_bert_dir, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("a B-PER\nb O\n", encoding="utf-8")
    (data / "dev.txt").write_text("c B-ORG\nd I-ORG\n\ne B-EVENT\n", encoding="utf-8")
    logs = []
    extract(ExtractConfig(model=str(tiny_bert_dir), dataset=str(data), cache_dir=str(tmp_path / "c"), unit_rows=256),
            progress=False, log=logs.append)
    assert any("dev: 3 tokens carry an entity type never seen in train (EVENT, ORG)" in m for m in logs), logs


def test_log_names_the_word_classes_unseen_in_train(tiny_bert_dir, tmp_path):
    """A POS tag of dev never seen in train is counted and said, as an unseen entity type is: a head never
    learns to predict it."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("a NN\nb VB\n", encoding="utf-8")
    (data / "dev.txt").write_text("c UH\nd UH\n\ne NN\nf DT\n", encoding="utf-8")
    logs = []
    result = extract(ExtractConfig(model=str(tiny_bert_dir), dataset=str(data), cache_dir=str(tmp_path / "c"),
                                   unit_rows=256, columns="word=0,pos=1"), progress=False, log=logs.append)
    assert any("dev: 3 tokens carry a word class never seen in train (DT, UH)" in m for m in logs), logs
    assert open_entry(result.path).group["dev"].attrs["unseen_in_train"] == 3


def test_devel_is_dev_and_the_log_names_the_files_not_read(tiny_bert_dir, tmp_path):
    """The biomedical sets name dev ``devel.tsv``; any other file of the folder (a README, a second
    train file) is named in the log once something is written, so a split under a name no split has
    is not lost without a word."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tsv").write_text("a B-PER\nb O\n", encoding="utf-8")
    (data / "devel.tsv").write_text("c B-PER\n", encoding="utf-8")
    (data / "test2.tsv").write_text("d O\n", encoding="utf-8")
    (data / "README.md").write_text("about\n", encoding="utf-8")
    (data / "scripts").mkdir()  # a subfolder is no file left unread
    (data / ".notes.swp").write_text("x", encoding="utf-8")  # nor is an editor's hidden file
    logs = []
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(data), cache_dir=str(tmp_path / "c"), unit_rows=256)
    result = extract(config, progress=False, log=logs.append)
    assert [s.split for s in result.splits] == ["train", "dev"]
    assert f"{data}: files not read, no split being named so: README.md, test2.tsv" in logs, logs
    logs.clear()
    extract(config, progress=False, log=logs.append)  # all cached: nothing written, nothing said
    assert not any("not read" in m for m in logs), logs


@pytest.mark.parametrize("model_fixture", ["tiny_bert_dir", "tiny_roberta_dir"])
def test_a_word_spelled_like_a_special_token_is_text(model_fixture, request):
    """A CoNLL word "[SEP]" (or "</s>") was encoded as the separator itself, a word "<mask>" of an MLM
    text as the mask: text is text, as `predict` and the exported model read it; a word of no tokens
    is still the unknown token, in its place."""
    from transformers import AutoTokenizer

    from layerfuse.extract.masking import make_blocks
    from layerfuse.extract.tokenize import tokenize_words

    tokenizer = AutoTokenizer.from_pretrained(request.getfixturevalue(model_fixture))
    specials = [tokenizer.sep_token, tokenizer.cls_token, tokenizer.mask_token, tokenizer.pad_token]
    words = ["Alice", *specials, "\u200b", "Bob"]
    tok = tokenize_words(tokenizer, [words])
    special_ids = {tokenizer.convert_tokens_to_ids(t) for t in specials}
    assert not special_ids & set(tok.ids.tolist())
    assert sorted(set(tok.word_of_sub.tolist())) == list(range(len(words)))
    if not tokenizer("\u200b", add_special_tokens=False)["input_ids"]:  # WordPiece deletes it; byte-level BPE keeps it
        assert tok.n_empty_words == 1
        assert tok.ids[tok.word_of_sub == words.index("\u200b")].tolist() == [tokenizer.unk_token_id]
    alone = tokenizer([["Alice", "Bob"]], is_split_into_words=True, add_special_tokens=False)["input_ids"][0]
    assert tok.ids[np.isin(tok.word_of_sub, [0, len(words) - 1])].tolist() == alone  # other words as before
    ids, _ = make_blocks(tokenizer, [f"Alice {tokenizer.mask_token} Bob {tokenizer.sep_token}"], block_size=16)
    assert not special_ids & set(ids.tolist())


def test_a_tag_column_of_only_o_is_said_at_extract_and_at_the_sample(tiny_bert_dir, tmp_path):
    """Every tag O was extracted without a word; `train-head --shots 8` then stopped on an internal
    "n_types (number of entity types) must be >= 1" and `--shots all` reported F1 0.0 as a result."""
    from conftest import write_conll

    from layerfuse.cache.reader import open_entry
    from layerfuse.training import TrainConfig, train_head
    from layerfuse.training.data import load_for_run

    d = tmp_path / "data"
    d.mkdir()
    for split in ("train", "dev"):
        write_conll(d / f"{split}.txt", [(["alice", "met", "bob"], ["O", "O", "O"])] * 4)
    logged = []
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(d), cache_dir=str(tmp_path / "c"), unit_rows=256)
    result = extract(config, progress=False, log=logged.append)
    assert any("train: every tag is O (no entity type)" in m for m in logged)
    entry = open_entry(result.path)
    with pytest.raises(LayerfuseError, match="draws N sentences per entity type, and this entry's tags have none"):
        data = load_for_run(entry, layers=None, shots=2, seed=0)
        train_head(TrainConfig(fusion="base", shots=2, epochs=1, seed=0), data)
