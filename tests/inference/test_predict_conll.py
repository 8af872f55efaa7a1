"""`predict --conll`: a head's predictions on a labelled file, written as `word gold pred` lines, read back
and scored by the project's metric, give the F1 the training evaluation gives on the same split."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from seqeval.metrics import classification_report

from layerfuse.cache.reader import open_entry
from layerfuse.cli.predict import main
from layerfuse.errors import LayerfuseError
from layerfuse.extract.datasets import load_dataset
from layerfuse.extract.run import ExtractConfig, extract
from layerfuse.inference.conll_eval import span_report
from layerfuse.training import TrainConfig, train_head
from layerfuse.training.checkpoint import save_checkpoint
from layerfuse.training.data import load_data
from layerfuse.training.evaluation import predict_tags, score
from layerfuse.training.metrics import Chunker, entity_f1

pytestmark = pytest.mark.usefixtures("one_thread")


def _train_and_save(entry, stem: str):
    """A Concat head trained briefly on ``entry``, saved at ``stem``; its dev F1 and tags by the training
    evaluation."""
    data = load_data(entry)
    result = train_head(TrainConfig(fusion="concat", shots=None, epochs=10, seed=0, lr=1e-2), data)
    save_checkpoint(stem, result.tagger, tagger_kwargs=result.tagger_kwargs, layers=result.layers,
                    label_names=data.label_names, cache_meta=data.meta, cache_path=entry.path)
    cpu = torch.device("cpu")
    f1, _ = score(result.tagger, data.dev, device=cpu, label_names=data.label_names, batch_size=64)
    cached = [[data.label_names[t] for t in p] for p in predict_tags(result.tagger, data.dev, device=cpu)]
    return stem, entry, data.label_names, f1, cached


@pytest.fixture(scope="module")
def head(tiny_cache, tmp_path_factory):
    return _train_and_save(open_entry(tiny_cache), str(tmp_path_factory.mktemp("ckpt") / "concat"))


@pytest.fixture(scope="module")
def subword_head(tiny_bert_dir, tiny_conll_dir, tmp_path_factory):
    """The same on a subword cache: a word is tagged, and scored, on its first subword's row."""
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), granularity="subword",
                           cache_dir=str(tmp_path_factory.mktemp("cache")), unit_rows=256, splits=("train", "dev"))
    entry = open_entry(extract(config, progress=False, log=lambda m: None).path)
    return _train_and_save(entry, str(tmp_path_factory.mktemp("ckpt") / "concat-subword"))


def _read_back(path) -> list[list[tuple[str, str, str]]]:
    sentences, current = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line:
            sentences.append(current)
            current = []
        else:
            current.append(tuple(line.split(" ")))
    assert not current  # every sentence ends with a blank line
    return sentences


def _f1(gold, pred, label_names) -> float:
    ids = {name: i for i, name in enumerate(label_names)}
    counts = np.array([len(s) for s in gold])
    chunker = Chunker(label_names)

    def flat(seqs):
        return np.array([ids[t] for s in seqs for t in s], dtype=np.int64)

    return entity_f1(chunker(flat(gold), counts), chunker(flat(pred), counts))


@pytest.mark.parametrize("fixture", ["head", "subword_head"])
def test_conll_output_scores_as_training_does(fixture, request, tiny_conll_dir, tmp_path):
    stem, entry, label_names, train_f1, cached = request.getfixturevalue(fixture)
    out_file = tmp_path / "dev.pred"
    out = CliRunner().invoke(main, ["--head", stem, "--conll", str(tiny_conll_dir / "dev.txt"),
                                    "--out", str(out_file), "--json"])
    assert out.exit_code == 0, out.output
    rows = _read_back(out_file)
    words = [[w for w, _, _ in s] for s in rows]
    gold = [[g for _, g, _ in s] for s in rows]
    pred = [[p for _, _, p in s] for s in rows]
    dev = load_dataset(str(tiny_conll_dir)).splits["dev"]  # the sentences the cache's dev split holds
    assert words == [w for w, _ in dev]
    assert gold == [t for _, t in dev]  # so the gold entities are the training evaluation's
    # The head reads fp32 live states here and fp16 cached ones in training: a near-tie could flip a tag
    # in principle; on this fixture none does, so the F1 must be equal to the last bit.
    assert pred == cached
    live_f1 = _f1(gold, pred, label_names)
    assert live_f1 == train_f1 > 0.3
    report = json.loads(out.output)
    assert report["micro"]["f1"] == live_f1
    # seqeval's classification_report (default mode) agrees type by type
    expected = classification_report(gold, pred, output_dict=True, zero_division=0)
    assert set(report["types"]) == set(expected) - {"micro avg", "macro avg", "weighted avg"}
    for name, got in [*report["types"].items(), ("micro avg", report["micro"])]:
        want = expected[name]
        assert got["support"] == want["support"]
        for key, other in (("precision", "precision"), ("recall", "recall"), ("f1", "f1-score")):
            assert got[key] == pytest.approx(float(want[other]), abs=1e-12)


def test_the_json_report_stays_json_with_the_bf16_note_in_it(head, tiny_conll_dir, tmp_path):
    """A head trained under bf16 autocast: the note on predict's float32 scores followed the JSON report on
    stderr, which then was no JSON."""
    import shutil

    stem, *_ = head
    bf16 = tmp_path / "bf16"
    shutil.copy(stem + ".safetensors", str(bf16) + ".safetensors")
    meta = json.loads(open(stem + ".json", encoding="utf-8").read())
    meta["config"] = {**(meta.get("config") or {}), "precision": "bf16"}
    (tmp_path / "bf16.json").write_text(json.dumps(meta), encoding="utf-8")
    out = CliRunner().invoke(main, ["--head", str(bf16), "--conll", str(tiny_conll_dir / "dev.txt"), "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stderr)
    assert "micro" in report and report["note"].startswith("training scored this head under bf16 autocast")
    table = CliRunner().invoke(main, ["--head", str(bf16), "--conll", str(tiny_conll_dir / "dev.txt")])
    assert table.stderr.splitlines()[-1].startswith("note: training scored this head under bf16")


def test_a_head_trained_on_an_int8_entry_is_said_to_differ(head, tiny_conll_dir, tmp_path):
    """Training read int8-rounded states, predict the live backbone: F1 25.5 against 20.7, not a word."""
    import shutil

    stem, *_ = head
    int8 = tmp_path / "int8"
    shutil.copy(stem + ".safetensors", str(int8) + ".safetensors")
    meta = json.loads(open(stem + ".json", encoding="utf-8").read())
    meta["cache"] = {**meta["cache"], "dtype": "int8"}
    (tmp_path / "int8.json").write_text(json.dumps(meta), encoding="utf-8")
    out = CliRunner().invoke(main, ["--head", str(int8), "--conll", str(tiny_conll_dir / "dev.txt")])
    assert out.exit_code == 0, out.output
    assert out.stderr.splitlines()[-1].startswith("note: training scored this head on the entry's int8 hidden states")
    plain = CliRunner().invoke(main, ["--head", stem, "--conll", str(tiny_conll_dir / "dev.txt")])
    assert "note:" not in plain.stderr  # a float16 entry: the same scores as training's


def test_conll_to_stdout_with_a_table(head, tiny_conll_dir):
    stem, *_ = head
    out = CliRunner().invoke(main, ["--head", stem, "--conll", str(tiny_conll_dir / "dev.txt")])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert len(lines[0].split()) == 3 and lines[-1] == ""  # conlleval's input alone on stdout
    table = out.stderr.splitlines()
    assert table[0].split() == ["type", "precision", "recall", "f1", "support"]
    assert table[-1].startswith("micro avg") and [r.split()[0] for r in table[1:-1]] == ["LOC", "ORG", "PER"]


def test_span_report_by_hand():
    names = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-PER", "O"]]
    pred = [["B-PER", "I-PER", "O", "O"], ["B-PER", "B-LOC"]]
    report = span_report(gold, pred, names)
    assert report["types"]["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2}
    assert report["types"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert report["micro"]["precision"] == pytest.approx(2 / 3) and report["micro"]["recall"] == pytest.approx(2 / 3)
    assert report["micro"]["support"] == 3


@pytest.mark.parametrize("body, line, value", [
    ("Alice B-PER\nmet\n", 4, "'met'"),  # one column: no tag
    ("Alice B-PER\nParis B-GPE\n", 4, "entity type 'GPE'"),  # a type the head was not trained on
    ("Alice B-PER\nParis X-LOC\n", 4, "'X-LOC'"),  # not a tag
])
def test_bad_conll_lines_are_one_line_errors(head, tmp_path, body, line, value):
    stem, *_ = head
    path = tmp_path / "bad.txt"
    path.write_text("-DOCSTART- O\n\n" + body, encoding="utf-8")
    out = CliRunner().invoke(main, ["--head", stem, "--conll", str(path)])
    assert out.exit_code == 1
    assert len(out.output.splitlines()) == 1 and out.output.startswith(f"error: {path}:{line}: ")
    assert value in out.output


def test_conll_excludes_text(head, tmp_path):
    stem, *_ = head
    out = CliRunner().invoke(main, ["--head", stem, "--conll", str(tmp_path / "x.txt"), "--text", "Alice"])
    assert out.exit_code == 2 and "--conll takes no --text" in out.output


def test_a_head_scored_under_bf16_is_said_to_differ(tiny_cache, tiny_conll_dir, tmp_path):
    """Training under bf16 autocast scores in bf16, predict in float32: their F1 differed by 0.45 points
    with nothing said. predict --conll now says so for such a head, and not for a float32 one."""
    entry = open_entry(tiny_cache)
    data = load_data(entry)
    for precision in ("bf16", "fp32"):
        config = TrainConfig(fusion="base", shots=None, epochs=1, seed=0, precision=precision)
        result = train_head(config, data)
        stem = str(tmp_path / precision)
        save_checkpoint(stem, result.tagger, tagger_kwargs=result.tagger_kwargs, layers=result.layers,
                        label_names=data.label_names, cache_meta=data.meta, cache_path=entry.path, config=config)
        run = CliRunner().invoke(main, ["--head", stem, "--conll", str(tiny_conll_dir / "dev.txt"),
                                        "--out", str(tmp_path / f"{precision}.txt")])
        assert run.exit_code == 0, run.output
        assert ("bf16 autocast" in run.stderr) == (precision == "bf16"), run.stderr


def test_an_unknown_type_is_named_at_its_own_line_whatever_the_columns(tmp_path):
    """The line was searched for in the last column: a head read with --columns word=0,ner=1 over a file
    with POS after the tag got "malformed tag 'NNP'" with no line, and a chunk file's I-INTJ was named
    as B-INTJ with no line."""
    from layerfuse.inference.conll_eval import check_known, check_known_tokens, read_labelled

    path = tmp_path / "t.txt"
    path.write_text("-DOCSTART- O NN\n\nAlice B-PER NNP\n\n\nB-GPE O NNP\nParis I-GPE NNP\n", encoding="utf-8")
    sentences = read_labelled(str(path), columns="word=0,ner=1")
    with pytest.raises(LayerfuseError, match=rf"^{re.escape(str(path))}:7: 'Paris I-GPE NNP': entity type 'GPE'"):
        check_known(str(path), sentences, ["O", "B-PER", "I-PER"])
    with pytest.raises(LayerfuseError, match=rf"^{re.escape(str(path))}:6: 'B-GPE O NNP': tag 'NNP'"):
        check_known_tokens(str(path), [(["Alice"], ["NN"]), (["B-GPE", "Paris"], ["NNP", "NN"])], ["NN"])


def test_columns_a_head_records_that_do_not_read_are_a_failure_not_a_usage_error(head, tiny_conll_dir, tmp_path):
    """The columns of a head's training data are read from its own file: a value there that does not read was
    said as click's usage error (exit 2) blaming a --columns the command line never gave."""
    import json
    import shutil

    stem = tmp_path / "edited"
    for suffix in (".json", ".safetensors"):
        shutil.copy(head[0] + suffix, str(stem) + suffix)
    meta_path = tmp_path / "edited.json"
    meta = json.loads(meta_path.read_text())
    meta["cache"]["dataset_source"] = "x (columns word=0,ner=x)"  # outside what the checksums cover
    meta_path.write_text(json.dumps(meta))
    out = CliRunner().invoke(main, ["--head", str(stem), "--conll", str(tiny_conll_dir / "dev.txt")])
    assert out.exit_code == 1 and "Usage:" not in out.output, out.output
    assert "the head records its training data as 'x (columns word=0,ner=x)'" in out.output
