"""Bad input through the commands themselves: one line naming the file, line or value, exit 1,
no traceback, and nothing written to the cache."""

from __future__ import annotations

import pytest
from cli_output import one_error_line, one_usage_error
from click.testing import CliRunner

from layerfuse.cli.extract import main as extract_main
from layerfuse.cli.train import main as train_main


@pytest.mark.parametrize("content, needle", [
    ("EU B-ORG\nrejects\n", "train.txt:2"),            # no tag
    ("EU NNP B-ORG\nrejects O\n", "train.txt:2"),       # column count changes
    ("EU Z-ORG\n", "train.txt:1"),                      # unknown tag prefix
    ("", "no sentences"),                                # empty file
    ("-DOCSTART- -X- -X- O\n\n", "no sentences"),       # only -DOCSTART-
])
def test_malformed_dataset_files(tmp_path, tiny_bert_dir, content, needle):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text(content)
    out = CliRunner().invoke(extract_main, ["--model", str(tiny_bert_dir), "--dataset", str(data),
                                            "--cache-dir", str(tmp_path / "cache"), "--quiet"])
    assert needle in one_error_line(out)
    assert not (tmp_path / "cache").exists()  # nothing started


def test_not_utf8_and_no_train_split(tmp_path, tiny_bert_dir):
    data = tmp_path / "latin"
    data.mkdir()
    (data / "train.txt").write_bytes("M\u00fcnchen B-LOC\n".encode("latin-1"))
    out = CliRunner().invoke(extract_main, ["--model", str(tiny_bert_dir), "--dataset", str(data)])
    assert "train.txt" in one_error_line(out) and "UTF-8" in out.output
    nodev = tmp_path / "nodev"
    nodev.mkdir()
    (nodev / "dev.txt").write_text("a O\n")
    out = CliRunner().invoke(extract_main, ["--model", str(tiny_bert_dir), "--dataset", str(nodev)])
    assert "no train split" in one_error_line(out)


def test_model_without_fast_tokenizer(tmp_path, tiny_bert_dir, tiny_conll_dir, monkeypatch):
    import transformers

    class Slow:
        is_fast = False

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Slow())
    out = CliRunner().invoke(extract_main, ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir),
                                            "--cache-dir", str(tmp_path)])
    assert "no fast tokenizer" in one_error_line(out)


def test_offline_hub_model_name(tmp_path, tiny_conll_dir):
    out = CliRunner().invoke(extract_main, ["--model", "roberta-large-nonexistent-xyz", "--dataset",
                                            str(tiny_conll_dir), "--cache-dir", str(tmp_path)])
    assert "hub is unreachable" in one_error_line(out)


@pytest.mark.parametrize("args, needle", [
    (["--layers", "9"], "out of range"),
    (["--shots", "1000"], "1000"),
    (["--shots", "zero"], "'zero'"),
])
def test_train_head_bad_options(tiny_cache, tmp_path, args, needle):
    out = CliRunner().invoke(train_main, ["--cache", tiny_cache, "--fusion", "concat", "--epochs", "1",
                                          "--out", str(tmp_path), *args])
    assert needle in one_usage_error(out)  # a wrong call: exit 2


def test_cache_that_is_not_an_entry(tmp_path):
    out = CliRunner().invoke(train_main, ["--cache", str(tmp_path / "nope"), "--epochs", "1"])
    assert "no cache entry" in one_error_line(out)


def test_hf_dataset_without_token_or_tag_columns(tmp_path, tiny_bert_dir):
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"words": [["a"]], "labels": [[0]]})}).save_to_disk(
        str(tmp_path / "hf"))
    out = CliRunner().invoke(extract_main, ["--model", str(tiny_bert_dir), "--dataset", str(tmp_path / "hf"),
                                            "--cache-dir", str(tmp_path / "cache")])
    line = one_error_line(out)
    assert "tokens" in line and "hf" in line
