"""Where a label set came from: a set added to an entry from other files of the same words (a POS entry's
words, read again from a copy with a chunk column) is recorded as read from those files, and a run, its
head and its exported card name them; the same column read under another name is stored under that name."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import make_sentences, write_conll

from layerfuse.cache import label_sets
from layerfuse.cli.main import main as cli

POS = ["DT", "NN", "VB", "JJ"]

pytestmark = pytest.mark.usefixtures("one_thread")


def _corpus(root, name, *, chunk: bool):
    """train/dev/test files of the same words and POS tags (a word's tag: its length), with a chunk column
    when ``chunk``."""
    folder = root / name
    folder.mkdir()
    for split, n, seed in (("train.txt", 40, 1), ("dev.txt", 15, 2), ("test.txt", 15, 3)):
        sentences = [(words, [POS[len(w) % 4] for w in words]) for words, _ in make_sentences(n, seed)]
        write_conll(folder / split, sentences,
                    line=lambda w, t: f"{w} {t} {'B-VP' if t == 'VB' else 'B-NP'}" if chunk else f"{w} {t}")
    return folder


def _cli(*args):
    out = CliRunner().invoke(cli, [str(a) for a in args])
    assert out.exit_code == 0, out.output
    return out.output


def _train(tmp_path, model, *where, labels: str, out: str):
    return _cli("train-head", *where, "--labels", labels, "--shots", "2", "--epochs", "1", "--fusion", "base",
                "--quiet", "--out", tmp_path / out, *(["--model", model] if "--cache" not in where else []),
                *(["--cache-dir", tmp_path / "cache"] if "--cache" not in where else []))


def _entry_of(output: str) -> str:
    return output.split(": ", 1)[1].split()[0]  # "cached: PATH" / "already cached, ...: PATH"


def test_a_set_added_from_another_corpus_is_named_as_read_from_it(tmp_path, tiny_bert_dir):
    """pos2 (word POS) extracted, then a chunk head trained on pos3 (word POS chunk, the same words and tags):
    pos2's entry is reused and the chunk set added to it, but the run, the head and the exported card named
    pos2, which has no chunk column, and `info` listed chunk under pos2's reading alone."""
    pos2, pos3 = _corpus(tmp_path, "pos2", chunk=False), _corpus(tmp_path, "pos3", chunk=True)
    entry = _entry_of(_cli("extract", "--model", tiny_bert_dir, "--dataset", pos2, "--columns", "word=0,pos=1",
                           "--cache-dir", tmp_path / "cache"))
    _train(tmp_path, tiny_bert_dir, "--dataset", pos3, "--columns", "word=0,pos=1,chunk=2", labels="chunk", out="runs")
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.is_dir()] == [entry.rsplit("/", 1)[1]]  # reused
    record = json.loads(next((tmp_path / "runs").glob("*-s0.json")).read_text())
    assert record["dataset"] == "pos3"
    head = next((tmp_path / "runs").glob("*.head.json"))
    cache = json.loads(head.read_text())["cache"]
    assert cache["dataset"] == "pos3" and cache["dataset_source"] == f"{pos3} (columns word=0,pos=1,chunk=2)"
    assert set(cache["label_fingerprints"]) == {"train", "dev", "test"}  # the chunk set's own, per split

    info = _cli("info", entry)
    lines = info.splitlines()
    chunk = next(i for i, line in enumerate(lines) if line.startswith("  labels     chunk (span): "))
    assert lines[chunk + 1] == f"             read from {pos3} (columns word=0,pos=1,chunk=2)"
    assert f"dataset    pos2 from {pos2} (columns word=0,pos=1)" in info  # the entry's own data: the primary set's

    # --cache alone names no data: the entry's listing says where the set was read from
    _train(tmp_path, tiny_bert_dir, "--cache", entry, labels="chunk", out="by-path")
    assert json.loads(next((tmp_path / "by-path").glob("*-s0.json")).read_text())["dataset"] == "pos3"

    _cli("export", head.with_suffix(""), "--out", tmp_path / "model")
    card = (tmp_path / "model" / "README.md").read_text()
    row = next(line for line in card.splitlines() if line.startswith("| dataset |"))
    assert "`pos3`" in row and "pos2" not in row and "label set `chunk`, fingerprint `" in row


def test_the_same_column_read_under_another_name_is_stored_under_that_name(tmp_path, tiny_bert_dir):
    """A pos entry, then `extract --columns word=0,xpos=1` of the same files: it said "reused" and stored no
    xpos set, and `--labels xpos` then asked for that same extract, in a loop."""
    pos2 = _corpus(tmp_path, "pos2", chunk=False)
    entry = _entry_of(_cli("extract", "--model", tiny_bert_dir, "--dataset", pos2, "--columns", "word=0,pos=1",
                           "--cache-dir", tmp_path / "cache"))
    again = _cli("extract", "--model", tiny_bert_dir, "--dataset", pos2, "--columns", "word=0,xpos=1",
                 "--cache-dir", tmp_path / "cache")
    assert f"already cached, label sets added: {entry}" in again and "label sets written (labels only): xpos" in again
    _train(tmp_path, tiny_bert_dir, "--dataset", pos2, "--columns", "word=0,xpos=1", labels="xpos", out="runs")
    record = json.loads(next((tmp_path / "runs").glob("*-s0.json")).read_text())
    assert record["config"]["labels"] == "xpos" and "best_dev_accuracy" in record
    ranked = _cli("rank-layers", "--model", tiny_bert_dir, "--dataset", pos2, "--columns", "word=0,xpos=1",
                  "--labels", "xpos", "--cache-dir", tmp_path / "cache")
    assert "layer" in ranked
    third = _cli("extract", "--model", tiny_bert_dir, "--dataset", pos2, "--columns", "word=0,xpos=1",
                 "--cache-dir", tmp_path / "cache")
    assert f"already cached, nothing to do: {entry}" in third  # stored once: not written again


def test_a_set_listed_without_its_origin_is_read_as_the_entry_s_data():
    """Entries whose listing predates the origin fields keep the entry's own dataset and source."""
    meta = {"dataset": "pos2", "dataset_source": "pos2 (columns word=0,pos=1)", "primary_labels": "pos",
            "primary_kind": "token", "label_names": ["NN"],
            "label_sets": {"chunk": {"names": ["O", "B-NP"], "kind": "span", "array": "labels.chunk.v1"}}}
    view = label_sets.view_meta(meta, "chunk", where="entry")
    assert (view["dataset"], view["dataset_source"]) == ("pos2", "pos2 (columns word=0,pos=1)")
    meta["label_sets"]["chunk"].update(dataset="pos3", source="pos3 (columns word=0,pos=1,chunk=2)")
    assert label_sets.view_meta(meta, "chunk", where="entry")["dataset"] == "pos3"
    assert label_sets.view_meta(meta, None, where="entry")["dataset"] == "pos2"
