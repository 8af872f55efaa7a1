"""Label sets: several labellings (NER, POS, chunk) of the same cached rows. Adding one to a cached
entry writes labels only (no forward pass, hidden bytes identical); entries made before label sets
open unchanged; a set a killed run left half-written is never read; heads train on any set."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zarr
from cli_output import one_usage_error
from click.testing import CliRunner

from layerfuse.cache import label_sets
from layerfuse.cache.reader import open_entry
from layerfuse.cli.main import main as cli
from layerfuse.errors import LayerfuseError
from layerfuse.extract import run as extract_run
from layerfuse.extract.datasets import load_dataset
from layerfuse.extract.reading import Reading
from layerfuse.extract.run import ExtractConfig, extract
from layerfuse.training.config import TrainConfig
from layerfuse.training.data import load_for_run
from layerfuse.training.loop import train_head

POS = ["DT", "NN", "VB", "JJ"]


@pytest.fixture(scope="module")
def conll4_dir(tmp_path_factory) -> Path:
    """CoNLL-2003 layout (word POS chunk NER) with POS and chunk tags that depend on the word, so a
    probe can learn them; chunk tags in IOB1 as in the eng.* files."""
    from conftest import make_sentences

    d = tmp_path_factory.mktemp("conll4")
    for name, n, seed in (("train.txt", 80, 1), ("dev.txt", 30, 2), ("test.txt", 30, 3)):
        with (d / name).open("w", encoding="utf-8") as f:
            for words, tags in make_sentences(n, seed):
                for w, t in zip(words, tags):
                    pos = POS[len(w) % 4]
                    chunk = "I-NP" if pos in ("DT", "NN", "JJ") else "I-VP"
                    f.write(f"{w} {pos} {chunk} {t}\n")
                f.write("\n")
    return d


def _extract(model, data, root, **kw):
    config = ExtractConfig(model=str(model), dataset=str(data), cache_dir=str(root), unit_rows=256, **kw)
    return extract(config, progress=False, log=lambda m: None)


def _hidden_digest(path: str) -> str:
    """sha256 of every file of the hidden, offsets, primary labels and words arrays of every split, as
    stored: the bytes adding a label set must not touch."""
    digest = hashlib.sha256()
    for split in ("train", "dev", "test"):
        for name in ("hidden", "offsets", "labels", "words"):
            for f in sorted((Path(path) / split / name).rglob("*")):
                if f.is_file():
                    digest.update(str(f.relative_to(path)).encode() + f.read_bytes())
    return digest.hexdigest()


def test_reader_finds_the_conll2003_columns(conll4_dir):
    data = load_dataset(str(conll4_dir))
    assert data.label_set_names == ["ner", "pos", "chunk"]
    assert data.column("pos").kind == "token" and data.column("pos").names == sorted(POS)
    chunk = data.column("chunk")
    assert chunk.kind == "span" and chunk.names == ["O", "B-NP", "I-NP", "B-VP", "I-VP"]
    assert all(tags[0].startswith("B-") for tags in chunk.tags["train"])  # IOB1 normalised to IOB2


def test_adding_a_label_set_writes_labels_only(tiny_bert_dir, conll4_dir, tmp_path, monkeypatch):
    first = _extract(tiny_bert_dir, conll4_dir, tmp_path, labels=("ner",))
    entry = open_entry(first.path)
    assert list(entry.label_sets) == ["ner"] and first.label_sets == []
    before = _hidden_digest(first.path)

    def no_forward(*args, **kwargs):
        raise AssertionError("adding a label set loaded the model")

    monkeypatch.setattr(extract_run, "load_model", no_forward)
    second = _extract(tiny_bert_dir, conll4_dir, tmp_path, labels=("pos", "chunk"))
    assert second.path == first.path and second.label_sets == ["pos", "chunk"]
    assert all(s.reused for s in second.splits)
    assert _hidden_digest(first.path) == before
    entry = open_entry(first.path)
    assert list(entry.label_sets) == ["ner", "pos", "chunk"]
    data = load_dataset(str(conll4_dir))
    pos = entry.with_labels("pos")
    assert pos.label_names == sorted(POS) and pos.meta["label_kind"] == "token"
    for split in ("train", "dev", "test"):
        expected = [sorted(POS).index(t) for tags in data.column("pos").tags[split] for t in tags]
        np.testing.assert_array_equal(pos.split(split).labels, expected)
    assert _extract(tiny_bert_dir, conll4_dir, tmp_path).label_sets == []  # current sets: nothing written


def test_extract_says_labels_only_when_no_hidden_state_was_written(tiny_bert_dir, conll4_dir, tmp_path):
    """A fresh extraction ended with "label sets written (labels only)" after writing every hidden state."""
    from layerfuse.cli.extract import main

    args = ["--model", str(tiny_bert_dir), "--dataset", str(conll4_dir), "--cache-dir", str(tmp_path), "--quiet"]
    fresh = CliRunner().invoke(main, [*args, "--labels", "ner,pos"])
    assert fresh.exit_code == 0, fresh.output
    assert "label sets written: pos" in fresh.output and "labels only" not in fresh.output
    added = CliRunner().invoke(main, [*args, "--labels", "chunk"])
    assert added.exit_code == 0, added.output
    assert "label sets written (labels only): chunk" in added.output
    assert "nothing to do" not in added.output and "already cached, label sets added: " in added.output
    again = CliRunner().invoke(main, [*args, "--labels", "chunk"])
    assert "already cached, nothing to do: " in again.output and "label sets written" not in again.output


def test_a_complete_entry_with_current_label_sets_is_extracted_without_its_lock(tiny_bert_dir, conll4_dir, tmp_path,
                                                                              monkeypatch):
    """`extract` of a complete entry took the writer lock (a read-write open of `ENTRY.lock`) to write label
    sets that were current: a colleague who may not write the lock got "Permission denied (....lock)"."""
    from layerfuse.cli.extract import main

    path = _extract(tiny_bert_dir, conll4_dir, tmp_path).path

    class NotMine:  # the lock of an entry a colleague made, not writable by this user
        def __init__(self, path, **kw):
            raise PermissionError(13, "Permission denied", f"{path}.lock")

    monkeypatch.setattr(extract_run, "EntryLock", NotMine)
    args = ["--model", str(tiny_bert_dir), "--dataset", str(conll4_dir), "--cache-dir", str(tmp_path), "--quiet"]
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and f"already cached, nothing to do: {path}" in again.output, again.output


def test_info_lists_the_label_sets(tiny_bert_dir, conll4_dir, tmp_path):
    path = _extract(tiny_bert_dir, conll4_dir, tmp_path).path
    out = CliRunner().invoke(cli, ["info", path]).output
    assert "labels     ner (span): O, B-LOC" in out
    assert "labels     pos (token): DT, JJ, NN, VB" in out and "labels     chunk (span)" in out


def test_an_entry_from_before_label_sets_opens_unchanged(tiny_cache):
    group = zarr.open_group(tiny_cache, mode="r+")
    stored = dict(group.attrs)
    attrs = {k: v for k, v in stored.items() if k not in (label_sets.LISTING, label_sets.PRIMARY)}
    group.attrs.clear()
    group.attrs.update(attrs)  # what an entry of the first release holds
    try:
        entry = open_entry(tiny_cache)
        assert list(entry.label_sets) == ["ner"]
        view = entry.with_labels(None)
        assert view.label_names == stored["label_names"] and view.meta["label_kind"] == "span"
        np.testing.assert_array_equal(view.split("dev").labels, group["dev"]["labels"][:])
        with pytest.raises(LayerfuseError, match="has the label sets ner"):
            entry.with_labels("pos")
    finally:
        group.attrs.clear()
        group.attrs.update(stored)


def test_a_half_written_label_set_is_never_read(tiny_bert_dir, conll4_dir, tmp_path):
    path = _extract(tiny_bert_dir, conll4_dir, tmp_path, labels=("ner",)).path
    group = zarr.open_group(path, mode="r+")
    group["train"].create_array("labels.pos", data=np.zeros(group["train"].attrs["n_rows"], dtype=np.int16))
    with pytest.raises(LayerfuseError, match="has the label sets ner"):  # the array alone lists nothing
        open_entry(path).with_labels("pos")
    assert _extract(tiny_bert_dir, conll4_dir, tmp_path).label_sets == ["pos", "chunk"]  # the rerun writes it
    assert open_entry(path).with_labels("pos").split("train").labels.max() > 0


@pytest.mark.parametrize("pointer", ["labels", "hidden", "../../x", "labels.chunk.v1"])
def test_a_label_set_reads_its_own_array_only(tiny_bert_dir, conll4_dir, tmp_path, pointer):
    """An edited listing pointed pos at the NER ids ("labels"): train-head reported an accuracy on them."""
    path = _extract(tiny_bert_dir, conll4_dir, tmp_path).path
    group = zarr.open_group(path, mode="r+")
    sets = dict(group.attrs["label_sets"])
    sets["pos"] = {**sets["pos"], "array": pointer}
    group.attrs["label_sets"] = sets
    with pytest.raises(LayerfuseError, match=r"label set 'pos' names the array .*, not its own"):
        open_entry(path).with_labels("pos")


def _copy_of(data_dir, dest):
    """A copy of a dataset folder to edit."""
    shutil.copytree(data_dir, dest)
    return dest


def test_a_changed_column_is_written_again(tiny_bert_dir, conll4_dir, tmp_path):
    data_dir = _copy_of(conll4_dir, tmp_path / "data")
    path = _extract(tiny_bert_dir, data_dir, tmp_path / "root").path
    text = (data_dir / "dev.txt").read_text().replace(" DT ", " XX ")
    (data_dir / "dev.txt").write_text(text)
    again = _extract(tiny_bert_dir, data_dir, tmp_path / "root")
    assert again.path == path and again.label_sets == ["pos"]  # the key (words and NER) is unchanged
    assert "XX" in open_entry(path).label_sets["pos"]["names"]


def test_subword_rows_carry_their_words_label(tiny_bert_dir, conll4_dir, tmp_path):
    path = _extract(tiny_bert_dir, conll4_dir, tmp_path, granularity="subword", special_tokens=True,
                    splits=("dev",)).path
    split = open_entry(path).with_labels("pos").split("dev")
    group = zarr.open_group(path, mode="r")["dev"]
    word_index, offsets = group["word_index"][:], split.offsets
    tags = load_dataset(str(conll4_dir)).column("pos").tags["dev"]
    for i in (0, 5, 17):
        rows = slice(offsets[i], offsets[i + 1])
        wi, got = word_index[rows], split.labels[rows]
        assert (got[wi < 0] < 0).all()  # special tokens: no label
        assert [sorted(POS)[x] for x in got[wi >= 0]] == [tags[i][w] for w in wi[wi >= 0]]


def test_a_head_learns_a_token_set_and_reports_accuracy(tiny_bert_dir, conll4_dir, tmp_path):
    entry = open_entry(_extract(tiny_bert_dir, conll4_dir, tmp_path).path)
    config = TrainConfig(fusion="concat", shots=None, epochs=10, seed=0, labels="pos", device="cpu")
    result = train_head(config, load_for_run(entry.with_labels("pos"), layers=None, shots=None, seed=0))
    record = result.to_dict()
    dev = entry.with_labels("pos").split("dev").labels
    majority = np.bincount(dev).max() / len(dev)
    assert record["best_dev_f1"] is None and majority + 0.1 < record["best_dev_accuracy"] <= 1.0
    assert "dev_accuracy" in record["evals"][0] and record["test_accuracy_at_best"] is not None
    ner = train_head(TrainConfig(fusion="concat", shots=None, epochs=1, seed=0, device="cpu"),
                     load_for_run(entry, layers=None, shots=None, seed=0)).to_dict()
    assert "best_dev_accuracy" not in ner and ner["best_dev_f1"] >= 0  # NER records keep their keys


def test_train_head_and_rank_layers_take_labels(tiny_bert_dir, conll4_dir, tmp_path):
    path = _extract(tiny_bert_dir, conll4_dir, tmp_path).path
    runner = CliRunner()
    out = runner.invoke(cli, ["train-head", "--cache", path, "--labels", "chunk", "--fusion", "concat", "--epochs",
                              "1", "--shots", "2", "--out", str(tmp_path / "runs"), "--quiet"])
    assert out.exit_code == 0, out.output
    assert "best dev F1" in out.output
    record = json.loads((tmp_path / "runs" / "concat-chunk-n2-e1-s0.json").read_text())  # named after its set
    assert record["config"]["labels"] == "chunk" and record["n_train_sentences"] == 2 * 2  # N x C (NP, VP)
    out = runner.invoke(cli, ["rank-layers", "--cache", path, "--labels", "pos", "--out", str(tmp_path / "r"),
                              "--quiet"])
    assert out.exit_code == 0, out.output and "4 tags" in out.output
    bad = runner.invoke(cli, ["train-head", "--cache", path, "--labels", "upos", "--out", str(tmp_path / "x")])
    assert "has the label sets ner, pos, chunk" in one_usage_error(bad)


def test_predict_conll_on_a_pos_head_reports_the_training_accuracy(tiny_bert_dir, conll4_dir, tmp_path):
    """A POS head scores the POS column of a CoNLL-2003 layout file: its 'word gold pred' lines, read
    back, give the accuracy the training evaluation gives on the same split, and the report says so."""
    import torch

    from layerfuse.cli.predict import main as predict
    from layerfuse.training.checkpoint import save_checkpoint
    from layerfuse.training.data import load_data
    from layerfuse.training.evaluation import score

    entry = open_entry(_extract(tiny_bert_dir, conll4_dir, tmp_path).path).with_labels("pos")
    data = load_data(entry)
    result = train_head(TrainConfig(fusion="concat", shots=None, epochs=5, seed=0, labels="pos", device="cpu"), data)
    stem = str(tmp_path / "pos-head")
    save_checkpoint(stem, result.tagger, tagger_kwargs=result.tagger_kwargs, layers=result.layers,
                    label_names=data.label_names, cache_meta=data.meta, cache_path=entry.path)
    accuracy, _ = score(result.tagger, data.dev, device=torch.device("cpu"), label_names=data.label_names,
                        batch_size=64, kind="token")
    out = tmp_path / "pred.txt"
    run = CliRunner().invoke(predict, ["--head", stem, "--conll", str(conll4_dir / "dev.txt"), "--out", str(out),
                                       "--json"])
    assert run.exit_code == 0, run.output
    lines = [line.split(" ") for line in out.read_text().splitlines() if line]
    assert {gold for _, gold, _ in lines} <= set(POS)  # the POS column, not the NER one
    read_back = np.mean([gold == pred for _, gold, pred in lines])
    assert read_back == pytest.approx(accuracy, abs=1e-12)
    report = json.loads(run.output.strip().splitlines()[-1])
    assert report["micro"]["accuracy"] == pytest.approx(accuracy, abs=1e-12)
    assert sum(t["support"] for t in report["tags"].values()) == len(lines)
    # raw text: a tag per word, no "entities" chunked out of POS tags (NNP read as B/I prefix N, type NP)
    text = CliRunner().invoke(predict, ["--head", stem, "--json", "--text", "the big dog ran"])
    assert text.exit_code == 0 and "seems not to be NE tag" not in text.output, text.output
    row = json.loads(text.stdout)
    assert set(row) == {"text", "words", "tags"} and len(row["tags"]) == 4 and set(row["tags"]) <= set(POS)
    plain = CliRunner().invoke(predict, ["--head", stem, "--text", "the big dog ran"]).stdout.splitlines()
    assert plain[1].split() == [f"{w}/{t}" for w, t in zip(row["words"], row["tags"])]


def test_a_sweep_on_a_token_set_reports_accuracy(tiny_bert_dir, conll4_dir, tmp_path):
    path = _extract(tiny_bert_dir, conll4_dir, tmp_path).path
    args = ["sweep", "--cache", path, "--labels", "pos", "--out", str(tmp_path / "sweep"), "--fusions", "base",
            "--shots", "1", "--epochs", "1", "--trials", "2", "--eval-points", "1", "--workers", "1",
            "--precision", "fp32", "--quiet"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "token accuracy (x100)" in result.stdout
    lines = [json.loads(line) for line in (tmp_path / "sweep" / "results.jsonl").read_text().splitlines()]
    records = lines
    assert len(records) == 2 and all(r["config"]["labels"] == "pos" and r["best_dev_accuracy"] > 0 for r in records)
    assert all(r["n_train_sentences"] == 4 for r in records)  # N x C: C = the 4 POS classes
    # NER runs into the same --out would be scored by F1: one report compares one metric, so refused up front
    ner = CliRunner().invoke(cli, [a for a in args if a not in ("--labels", "pos")])
    assert ner.exit_code == 1 and "scored by F1 (ner) and accuracy (pos)" in ner.stderr, ner.output
    assert len((tmp_path / "sweep" / "results.jsonl").read_text().splitlines()) == 2  # nothing trained
    ner_run = {**records[0], "run_id": "ner-run", "best_dev_accuracy": None, "best_dev_f1": 0.9,
               "config": {**records[0]["config"], "labels": None}}
    with open(tmp_path / "sweep" / "results.jsonl", "a") as f:  # such a folder, merged by hand: report and --best
        f.write(json.dumps(ner_run) + "\n")
    (tmp_path / "sweep" / "heads" / "ner-run.json").write_text(json.dumps(ner_run))
    for command in (["sweep", "--report", "--out", str(tmp_path / "sweep")],
                    ["export", str(tmp_path / "sweep"), "--best", "--out", str(tmp_path / "model")]):
        refused = CliRunner().invoke(cli, command)
        assert refused.exit_code == 1 and "compares one metric" in refused.stderr, (command, refused.output)


def test_a_treebank_is_extracted_with_upos_xpos_and_deprel(tiny_bert_dir, tmp_path):
    """A UD treebank's entry: UPOS is the primary set (the `labels` array), XPOS and DEPREL beside it;
    a head trains on the primary set by default and reports accuracy."""
    from conftest import make_sentences

    ud = tmp_path / "UD_Toy"
    ud.mkdir()
    for split, n, seed in (("train", 60, 1), ("dev", 20, 2)):
        lines = []
        for words, _ in make_sentences(n, seed):
            lines.append(f"# text = {' '.join(words)}")
            for i, w in enumerate(words, 1):
                upos = "PROPN" if w[0].isupper() else "NOUN"
                lines.append("\t".join([str(i), w, w.lower(), upos, upos[:2], "_", str(i - 1), "dep" if i > 1
                                        else "root", "_", "_"]))
            lines.append("")
        (ud / f"toy-ud-{split}.conllu").write_text("\n".join(lines) + "\n", encoding="utf-8")
    entry = open_entry(_extract(tiny_bert_dir, ud, tmp_path / "root").path)
    assert list(entry.label_sets) == ["upos", "xpos", "deprel"]
    assert entry.label_sets["upos"] == {"names": ["NOUN", "PROPN"], "kind": "token"}
    assert entry.with_labels("deprel").label_names == ["dep", "root"]
    result = train_head(TrainConfig(fusion="base", shots=None, epochs=2, seed=0, device="cpu"),
                        load_for_run(entry, layers=None, shots=None, seed=0)).to_dict()
    assert result["best_dev_f1"] is None and result["best_dev_accuracy"] > 0.5


def test_a_packed_sweep_on_a_token_set_scores_accuracy_as_solo(tiny_bert_dir, conll4_dir, tmp_path):
    from layerfuse.cache.reader import open_entry
    from layerfuse.experiments import grid, run_sweep
    from layerfuse.training import TrainConfig

    entry = open_entry(_extract(tiny_bert_dir, conll4_dir, tmp_path).path)
    base = TrainConfig(fusion="concat", shots=2, epochs=3, seed=0, batch_size=4, eval_points=2, device="cpu",
                       labels="pos", dropout=0.0)
    configs = grid(fusions=["concat"], shots=[2], epochs=[3], trials=2, base=base)
    quiet = {"workers": 0, "progress": False, "log": lambda m: None}
    solo = run_sweep(entry, configs, out=str(tmp_path / "solo"), **quiet)
    packed = run_sweep(entry, configs, out=str(tmp_path / "packed"), pack=2, **quiet)
    for rid, record in solo.items():
        assert packed[rid]["seconds"]["pack"] == 2 and packed[rid]["best_dev_f1"] is None
        assert packed[rid]["best_dev_accuracy"] == pytest.approx(record["best_dev_accuracy"], abs=1e-4)
        assert packed[rid]["test_accuracy_at_best"] == pytest.approx(record["test_accuracy_at_best"], abs=1e-4)


def test_hf_pos_and_chunk_columns_become_label_sets(tmp_path):
    """A `save_to_disk` copy with CoNLL-2003's hub schema (ClassLabel pos_tags, chunk_tags, ner_tags)."""
    import datasets

    pos = datasets.ClassLabel(names=['"', "NN", "NNP", "VB"])
    chunk = datasets.ClassLabel(names=["O", "B-NP", "I-NP", "B-VP"])
    ner = datasets.ClassLabel(names=["O", "B-PER", "I-PER"])
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "pos_tags": datasets.Sequence(pos), "chunk_tags": datasets.Sequence(chunk),
                                  "ner_tags": datasets.Sequence(ner)})
    rows = {"tokens": [["Alice", "runs"], []], "pos_tags": [[2, 3], []], "chunk_tags": [[1, 3], []],
            "ner_tags": [[1, 0], []]}
    datasets.DatasetDict({s: datasets.Dataset.from_dict(rows, features=features) for s in ("train", "validation")}
                         ).save_to_disk(str(tmp_path / "hf"))
    data = load_dataset(str(tmp_path / "hf"))
    assert data.label_set_names == ["ner", "pos", "chunk"]
    assert data.column("pos").tags["dev"] == [["NNP", "VB"]]  # the empty row is skipped, as for the words
    assert data.column("chunk").kind == "span" and data.column("chunk").tags["train"] == [["B-NP", "B-VP"]]


@pytest.mark.parametrize(("pos_tags", "said"), [
    ([[1, 2], [1]], "split 'train' row 1: 2 tokens but 1 pos_tags"),  # one short: took the next sentence's tag
    ([[1, 2], [1, 2, 0]], "split 'train' row 1: 2 tokens but 3 pos_tags"),
])
def test_a_label_set_column_of_another_length_than_the_words_is_refused(tmp_path, pos_tags, said):
    import datasets

    pos = datasets.ClassLabel(names=["NN", "NNP", "VB"])
    ner = datasets.ClassLabel(names=["O", "B-PER", "I-PER"])
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "pos_tags": datasets.Sequence(pos), "ner_tags": datasets.Sequence(ner)})
    rows = {"tokens": [["Alice", "runs"], ["Bob", "runs"]], "pos_tags": pos_tags, "ner_tags": [[1, 0], [1, 0]]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows, features=features)}).save_to_disk(
        str(tmp_path / "hf"))
    with pytest.raises(LayerfuseError, match=re.escape(said)):
        load_dataset(str(tmp_path / "hf"))


@pytest.mark.parametrize(("tokens", "feature"), [([7], "Value('int32')"), (["ab"], "Value('string')"),
                                                 ([[1, 2]], "List(Value('int32'))")])
def test_a_tokens_field_that_is_no_sequence_of_strings_is_refused(tmp_path, tokens, feature):
    """An int column was a TypeError traceback; a string column was read letter by letter as words."""
    import datasets

    value = {"Value('int32')": datasets.Value("int32"), "Value('string')": datasets.Value("string"),
             "List(Value('int32'))": datasets.Sequence(datasets.Value("int32"))}[feature]
    features = datasets.Features({"words": value, "ner_tags": datasets.Sequence(datasets.Value("string"))})
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"words": tokens, "ner_tags": [["O", "O"]]},
                                                              features=features)}).save_to_disk(str(tmp_path / "hf"))
    with pytest.raises(LayerfuseError, match=re.escape(f"field 'words' must be a sequence of strings (the words), "
                                                       f"got {feature}")):
        load_dataset(str(tmp_path / "hf"), read=Reading(tokens_field="words"))


def test_extracting_some_splits_adds_to_a_set_never_shrinks_it(tiny_bert_dir, conll4_dir, tmp_path):
    path = _extract(tiny_bert_dir, conll4_dir, tmp_path).path
    before = open_entry(path).with_labels("chunk").split("train").labels
    _extract(tiny_bert_dir, conll4_dir, tmp_path, splits=("test",), labels=("chunk",))
    entry = open_entry(path)
    assert entry.label_sets["chunk"]["splits"] == ["dev", "test", "train"]
    np.testing.assert_array_equal(entry.with_labels("chunk").split("train").labels, before)


def test_a_tag_changed_in_dev_relabels_dev_under_splits_train(tiny_bert_dir, conll4_dir, tmp_path):
    # the new tag changes the set's names: its dev labels were dropped (train alone listed), not relabelled
    data_dir = _copy_of(conll4_dir, tmp_path / "data")
    path = _extract(tiny_bert_dir, data_dir, tmp_path / "root").path
    text = (data_dir / "dev.txt").read_text().replace(" DT ", " XX ", 1)
    (data_dir / "dev.txt").write_text(text)
    logs = []
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(data_dir), cache_dir=str(tmp_path / "root"),
                           unit_rows=256, splits=("train",))
    extract(config, progress=False, log=logs.append)
    entry = open_entry(path)
    pos = entry.label_sets["pos"]
    assert "XX" in pos["names"] and pos["splits"] == ["dev", "test", "train"], pos
    dev = entry.with_labels("pos").split("dev")
    assert pos["names"].index("XX") in set(dev.labels.tolist())
    assert any("label set 'pos'" in m and "stored for train, dev, test" in m for m in logs), logs
    again = _extract(tiny_bert_dir, data_dir, tmp_path / "root", splits=("train",))
    assert again.label_sets == []  # current now: nothing written again


def test_a_label_set_rewritten_under_a_reader_keeps_the_readers_version(tiny_bert_dir, conll4_dir, tmp_path):
    data_dir = _copy_of(conll4_dir, tmp_path / "data")
    path = _extract(tiny_bert_dir, data_dir, tmp_path / "root").path
    reader = open_entry(path).with_labels("chunk")  # holds the names and the version it opened
    names, ids = reader.label_names, {s: reader.split(s).labels for s in ("train", "dev")}
    for f in data_dir.iterdir():  # another labelling of the same words: NP and VP swapped
        f.write_text(f.read_text().replace("I-NP", "I-TMP").replace("I-VP", "I-NP").replace("I-TMP", "I-VP"))
    assert _extract(tiny_bert_dir, data_dir, tmp_path / "root").label_sets == ["chunk"]
    fresh = open_entry(path).with_labels("chunk")
    assert fresh.label_names == names  # the same names, other ids: only a mixed read would hide it
    assert (fresh.split("train").labels != ids["train"]).any()
    assert reader.label_names == names
    for split in ("train", "dev"):  # read again after the rewrite (a fresh split object), still its version's
        np.testing.assert_array_equal(reader.split(split).labels, ids[split])
    reader.close(), fresh.close()
    for f in data_dir.iterdir():  # a third version, no reader left: only the listed and the replaced one stay
        f.write_text(f.read_text().replace("I-NP", "I-ADJP"))
    _extract(tiny_bert_dir, data_dir, tmp_path / "root")
    train = zarr.open_group(path, mode="r")["train"]
    kept = sorted(k for k, _ in train.arrays() if k.startswith("labels.chunk"))
    assert kept == ["labels.chunk.v2", "labels.chunk.v3"]


def test_train_head_refuses_data_of_another_set_than_its_config(tiny_bert_dir, conll4_dir, tmp_path):
    """From Python, data and config are made apart: a config saying labels="pos" trained the NER data it
    was handed, and its record said pos."""
    entry = open_entry(_extract(tiny_bert_dir, conll4_dir, tmp_path).path)
    ner = load_for_run(entry, layers=None, shots=None, seed=0)
    config = TrainConfig(fusion="base", shots=None, epochs=1, seed=0)
    with pytest.raises(LayerfuseError, match=r"the config trains label set 'pos' but the data .* holds 'ner'"):
        train_head(replace(config, labels="pos"), ner)
    pos = load_for_run(entry.with_labels("pos"), layers=None, shots=None, seed=0)
    with pytest.raises(LayerfuseError, match=r"label set 'ner' but the data .* holds 'pos'"):
        train_head(config, pos)  # labels None: the primary set
    assert train_head(replace(config, labels="pos"), pos).best_dev_accuracy is not None


@pytest.mark.parametrize("labels, said", [
    ({"train": "ids past the names"}, "label id 2 is past its 2 names"),  # a target out of bounds in training
    ({"train": "floats"}, "label ids must be integers, not float64"),  # truncated in silence
    ({"nosuch": "ids"}, "has no split 'nosuch'"),  # zarr's bare KeyError
    ({"train": "below int16"}, "label id -40000 is below int16's range"),  # read back as label 25536
    ({"train": "ids", "name": "a/b"}, "label set name 'a/b': a lower-case letter"),  # a KeyError of its array
    ({"train": "ids", "names": ["A", "A"]}, "its names hold duplicates"),
])
def test_a_label_set_is_checked_before_it_is_written(entry_copy, labels, said):
    n = open_entry(entry_copy).split("train").n_rows
    arrays = {"ids past the names": np.arange(n) % 3, "floats": np.zeros(n) + 0.7, "ids": np.zeros(n, dtype=int),
              "below int16": np.full(n, -40000)}
    labels = dict(labels)
    name, names = labels.pop("name", "toy"), labels.pop("names", ["A", "B"])
    with pytest.raises(LayerfuseError, match=said):
        label_sets.write_label_set(entry_copy, name, kind="token", names=names,
                                   fingerprints=dict.fromkeys(labels, "fp"),
                                   labels={split: arrays[what] for split, what in labels.items()})
    assert "toy" not in open_entry(entry_copy).label_sets


def test_a_full_disk_while_a_label_set_is_written_names_its_place(entry_copy, monkeypatch):
    """zarr's own write of a label array on a full disk raised an OSError with no file: `error: No space
    left on device`, naming nothing."""
    import errno

    import zarr

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(zarr.Group, "create_array", full)
    n = open_entry(entry_copy).split("train").n_rows
    said = rf"No space left on device writing label set 'toy' \({entry_copy}/zarr\.json or an array's beside it\)"
    with pytest.raises(LayerfuseError, match=said + "; free space and rerun"):
        label_sets.write_label_set(entry_copy, "toy", kind="token", names=["A", "B"], fingerprints={"train": "fp"},
                                   labels={"train": np.zeros(n, dtype=int)})
    assert "toy" not in open_entry(entry_copy).label_sets


def test_runs_and_probes_on_a_set_relabelled_since_are_not_taken_for_done(tiny_bert_dir, conll4_dir, tmp_path):
    """A relabel keeps the entry's key and the runs' ids: a resumed sweep took the old runs for done ones and
    averaged the two labellings in one cell, and a probe rerun printed the old table."""
    from layerfuse.cache.reader import open_entry
    from layerfuse.probing import run_probes

    data_dir = _copy_of(conll4_dir, tmp_path / "data")
    path = _extract(tiny_bert_dir, data_dir, tmp_path / "root").path
    args = _small_sweep(path, tmp_path / "sweep", "pos")
    assert CliRunner().invoke(cli, [*args, "--trials", "1"]).exit_code == 0
    probe = _small_probe(tmp_path / "probe")
    before = run_probes(open_entry(path), **probe)
    assert run_probes(open_entry(path), **probe) == before  # a rerun on the same labels trains nothing

    for split in ("train", "dev", "test"):
        text = (data_dir / f"{split}.txt").read_text().replace(" NN ", " VB ")
        (data_dir / f"{split}.txt").write_text(text)
    assert _extract(tiny_bert_dir, data_dir, tmp_path / "root").path == path  # the same entry, relabelled

    refused = CliRunner().invoke(cli, [*args, "--trials", "2"])
    assert refused.exit_code == 1 and "before it was relabelled" in refused.stderr, refused.output
    assert refused.stderr.count("\n") == 1, refused.stderr  # the one line, before anything else is said
    assert len((tmp_path / "sweep" / "results.jsonl").read_text().splitlines()) == 1  # nothing trained
    after = run_probes(open_entry(path), **probe)
    # trained again, on the new labels
    assert all(a["labels_fingerprints"] != b["labels_fingerprints"] for a, b in zip(after, before))
    assert all(r["n_classes"] == 3 for r in after) and all(r["n_classes"] == 4 for r in before)


def test_a_listing_from_before_split_fingerprints_rewritten_alike_is_no_relabel(tiny_bert_dir, conll4_dir, tmp_path):
    """extract rewrites such a listing once, with the same labels: its runs and probes were then refused as
    on a relabelled set, and every probe trained again."""
    import zarr

    from layerfuse.cache.reader import open_entry
    from layerfuse.probing import run_probes

    data_dir = _copy_of(conll4_dir, tmp_path / "data")
    path = _extract(tiny_bert_dir, data_dir, tmp_path / "root").path
    root = zarr.open_group(path, mode="a")
    sets = dict(root.attrs["label_sets"])
    sets["pos"] = {k: v for k, v in sets["pos"].items() if k != "split_fingerprints"}  # as older releases wrote it
    root.attrs["label_sets"] = sets
    args = _small_sweep(path, tmp_path / "sweep", "pos")
    assert CliRunner().invoke(cli, [*args, "--trials", "1"]).exit_code == 0
    probe = _small_probe(tmp_path / "probe")
    before = run_probes(open_entry(path), **probe)
    _extract(tiny_bert_dir, data_dir, tmp_path / "root")  # rewrites the listing, labels unchanged
    assert open_entry(path).label_sets["pos"].get("split_fingerprints")
    extended = CliRunner().invoke(cli, [*args, "--trials", "2"])
    assert extended.exit_code == 0, extended.output
    assert run_probes(open_entry(path), **probe) == before  # nothing trained again


def test_a_split_added_to_the_entry_is_no_relabel(tiny_bert_dir, conll4_dir, tmp_path):
    """Every split's fingerprint was in one digest: adding test made the runs on train and dev look relabelled."""
    path = _extract(tiny_bert_dir, conll4_dir, tmp_path / "root", splits=("train", "dev")).path
    args = _small_sweep(path, tmp_path / "sweep", "chunk")
    assert CliRunner().invoke(cli, [*args, "--trials", "1"]).exit_code == 0
    assert _extract(tiny_bert_dir, conll4_dir, tmp_path / "root").path == path  # test added to the same entry
    extended = CliRunner().invoke(cli, [*args, "--trials", "2"])
    assert extended.exit_code == 0, extended.output


def _small_sweep(path: str, out, labels: str) -> list[str]:
    """A one-run base sweep's arguments on ``labels`` (no --trials: each test adds its own)."""
    return ["sweep", "--cache", path, "--labels", labels, "--out", str(out), "--fusions", "base", "--shots", "1",
            "--epochs", "1", "--eval-points", "1", "--workers", "1", "--precision", "fp32", "--quiet"]


def _small_probe(out) -> dict:
    """`run_probes` keywords for a few quick POS probes."""
    from layerfuse.probing import ProbeConfig

    return {"out": str(out), "label_set_names": ["pos"], "control": False, "config": ProbeConfig(min_steps=2, epochs=1)}


def test_runs_on_a_pos_primary_entry_name_their_label_set(tiny_bert_dir, conll4_dir, tmp_path):
    """A run on an entry whose primary set is POS records ``label_set: pos`` (its config's labels are None, as
    for any primary set, or `--labels pos` named it): a chunk sweep into its folder is refused naming both sets,
    not "accuracy (ner)"; NER runs record no label_set, as before."""
    path = _extract(tiny_bert_dir, conll4_dir, tmp_path, columns="word=0,pos=1,chunk=2").path
    out = tmp_path / "sweep"
    args = [a for a in _small_sweep(path, out, "pos") if a not in ("--labels", "pos")]
    for more in (["--trials", "1"], ["--labels", "pos", "--trials", "2"]):  # the second trains seed 1 only
        assert CliRunner().invoke(cli, [*args, *more]).exit_code == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["config"]["labels"], r["label_set"]) for r in records] == [(None, "pos")] * 2
    chunk = CliRunner().invoke(cli, _small_sweep(path, out, "chunk"))
    assert chunk.exit_code == 1 and "scored by F1 (chunk) and accuracy (pos)" in chunk.stderr, chunk.output
    ner_path = _extract(tiny_bert_dir, conll4_dir, tmp_path / "ner").path
    ner = CliRunner().invoke(cli, [a for a in _small_sweep(ner_path, tmp_path / "ner-sweep", "ner")
                                   if a not in ("--labels", "ner")])
    assert ner.exit_code == 0 and "label_set" not in (tmp_path / "ner-sweep" / "results.jsonl").read_text()
