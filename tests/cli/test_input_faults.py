"""Malformed input that used to end in a traceback: through `extract`, one `error:` line naming the
file, line and value, exit 1, nothing written."""

from __future__ import annotations

import pytest
from cli_output import one_error_line, one_usage_error
from click.testing import CliRunner

from layerfuse.cli.extract import main as extract_main


def _extract(tmp_path, model, data):
    return CliRunner().invoke(extract_main, ["--model", str(model), "--dataset", str(data),
                                             "--cache-dir", str(tmp_path / "cache"), "--quiet"])


# A superscript digit passes str.isdigit() and then fails int(): a 43-line ValueError before.
@pytest.mark.parametrize("row, value", [
    ("\u00b2\tb\tb\tX\t_\t_\t1\tdep\t_\t_", "'\u00b2'"),  # id
    ("2\tb\tb\tX\t_\t_\t\u00b2\tdep\t_\t_", "'\u00b2'"),  # HEAD
])
def test_conllu_superscript_digit(tmp_path, tiny_bert_dir, row, value):
    data = tmp_path / "UD_Toy"
    data.mkdir()
    (data / "train.conllu").write_text("1\ta\ta\tX\t_\t_\t0\troot\t_\t_\n" + row + "\n\n", encoding="utf-8")
    line = one_error_line(_extract(tmp_path, tiny_bert_dir, data))
    assert "train.conllu:2: " in line and value in line
    assert not (tmp_path / "cache").exists()


def test_malformed_chunk_tag_names_file_and_line(tmp_path, tiny_bert_dir):
    data = tmp_path / "conll"
    data.mkdir()
    (data / "train.txt").write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ Z-VP O\n\n")
    line = one_error_line(_extract(tmp_path, tiny_bert_dir, data))
    assert "train.txt:4: chunk column" in line and "'Z-VP'" in line
    assert not (tmp_path / "cache").exists()


def test_a_none_token_in_a_hf_dataset_is_one_line(tmp_path, tiny_bert_dir):
    """A null in a HF dataset's tokens was stored as the word "None" and encoded; it is refused in one
    line naming the split, sentence and position, nothing written."""
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=["O", "B-PER"]))})
    rows = {"tokens": [["John", "went"], ["to", None, "Paris"]], "ner_tags": [[1, 0], [0, 0, 0]]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows, features=features)}).save_to_disk(
        str(tmp_path / "hf"))
    out = CliRunner().invoke(extract_main, ["--model", str(tiny_bert_dir), "--dataset", str(tmp_path / "hf"),
                                    "--cache-dir", str(tmp_path / "cache"), "--quiet"])
    line = one_error_line(out)
    assert "split 'train' sentence 1 (row 1), position 1: tokens holds a missing token (None)" in line
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_a_dataset_without_dev_is_said_at_extraction(tmp_path, tiny_bert_dir, tiny_conll_dir):
    """A folder with train.txt alone extracted in silence; train-head then asked to "extract it first",
    which extracting again could not do."""
    data = tmp_path / "train_only"
    data.mkdir()
    (data / "train.txt").write_text((tiny_conll_dir / "train.txt").read_text())
    out = _extract(tmp_path, tiny_bert_dir, data)
    assert out.exit_code == 0, out.output
    assert "note: the dataset has no dev split" in out.stderr
    asked = CliRunner().invoke(extract_main, ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir),
                                              "--cache-dir", str(tmp_path / "cache"), "--quiet", "--splits", "train"])
    assert asked.exit_code == 0 and "no dev split" not in asked.stderr  # --splits train: nothing to say


def test_a_line_of_unicode_spaces_shows_what_is_on_it(tmp_path, tiny_bert_dir):
    """A line holding only NBSP is a token line without a tag; the error shows '\\xa0', not ''."""
    data = tmp_path / "conll"
    data.mkdir()
    (data / "train.txt").write_text("EU B-ORG\n\u00a0\nrejects O\n\n", encoding="utf-8")
    line = one_error_line(_extract(tmp_path, tiny_bert_dir, data))
    assert "train.txt:2: a token line without a tag: '\\xa0'" in line


@pytest.mark.parametrize("args, said", [(["--text", "   "], "the text given has only blank lines"),
                                        ([], "pass --text, --file or --fill-mask")])
def test_predict_with_nothing_to_tag_says_what_was_given(tmp_path, args, said):
    from layerfuse.cli.main import main

    result = CliRunner().invoke(main, ["predict", "--head", str(tmp_path / "none.head"), *args])
    if args:  # text that holds nothing: exit 1
        assert one_error_line(result) == f"error: nothing to tag: {said}"
    else:  # no input named: a wrong call, exit 2
        assert one_usage_error(result) == f"Error: nothing to tag: {said}"


def test_predict_fill_mask_with_only_blank_text_says_fill(tmp_path):
    from layerfuse.cli.main import main

    result = CliRunner().invoke(main, ["predict", "--head", str(tmp_path / "none.head"), "--fill-mask", " "])
    assert one_error_line(result) == "error: nothing to fill: the text given has only blank lines"


def test_extract_labels_empty_is_one_line(tmp_path, tiny_bert_dir, tiny_conll_dir):
    """`extract --labels ""` ran as if no --labels were given, where probe and sweep say it is empty."""
    result = CliRunner().invoke(extract_main, ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir),
                                               "--cache-dir", str(tmp_path / "cache"), "--labels", "", "--quiet"])
    assert one_usage_error(result) == "Error: --labels is empty"


@pytest.mark.parametrize("rows", ["-5", "0", "1000000000"])
def test_unit_rows_out_of_range_is_one_line(tmp_path, tiny_bert_dir, tiny_conll_dir, rows):
    """The hidden --unit-rows: -5 and 10^9 were numpy's and zarr's tracebacks, 0 the default in silence."""
    result = CliRunner().invoke(extract_main, ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir),
                                               "--cache-dir", str(tmp_path / "cache"), "--unit-rows", rows, "--quiet"])
    assert one_usage_error(result) == f"Error: --unit-rows {rows} is outside 1..65536 (rows per shard)"
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


@pytest.mark.parametrize("command", ["train-head", "sweep"])
def test_a_head_far_deeper_than_any_backbone_is_refused_before_it_is_built(tiny_cache, tmp_path, command):
    """--extra-layers 99999 built layers until the kernel killed the process, without a line."""
    from layerfuse.cli.main import main

    more = ["--fusions", "extra", "--shots", "2", "--epochs", "1", "--trials", "1"] if command == "sweep" else \
        ["--fusion", "extra", "--shots", "2", "--epochs", "1"]
    result = CliRunner().invoke(main, [command, "--cache", tiny_cache, *more, "--extra-layers", "99999",
                                       "--out", str(tmp_path / "runs")])
    assert result.exit_code in (1, 2) and ("extra_layers must be <= 48, got 99999" in result.output or
                                           "is not an integer >= 1 and <= 48" in result.output), result.output


def test_a_sweep_takes_the_device_train_head_takes(tiny_cache, tmp_path):
    """`sweep --device` was no option: a sweep on a GPU machine could not be kept on the CPU."""
    import json

    from layerfuse.cli.main import main

    args = ["sweep", "--cache", tiny_cache, "--fusions", "base", "--shots", "2", "--epochs", "1", "--trials", "1",
            "--workers", "1", "--quiet", "--out", str(tmp_path / "runs")]
    result = CliRunner().invoke(main, [*args, "--device", "cpu"])
    assert result.exit_code == 0, result.output
    [record] = [json.loads(line) for line in (tmp_path / "runs" / "results.jsonl").read_text().splitlines()]
    assert record["config"]["device"] == "cpu"
    bogus = CliRunner().invoke(main, [*args, "--device", "bogus"])
    assert "bogus" in one_usage_error(bogus)


def test_rank_layers_refuses_a_file_as_out_before_it_scores(tiny_cache, tmp_path):
    from layerfuse.cli.main import main

    (tmp_path / "a-file").write_text("mine")
    result = CliRunner().invoke(main, ["rank-layers", "--cache", tiny_cache, "--out", str(tmp_path / "a-file")])
    assert result.exit_code == 1 and "is a file, not a folder" in one_error_line(result)
    assert (tmp_path / "a-file").read_text() == "mine"


@pytest.mark.parametrize("command", ["train-head", "sweep", "rank-layers"])
def test_cache_beside_model_or_dataset_is_refused(tiny_cache, tmp_path, command):
    """`train-head --cache ENTRY --model bert-base-cased` trained on ENTRY's model and said nothing."""
    from layerfuse.cli.main import main

    result = CliRunner().invoke(main, [command, "--cache", tiny_cache, "--model", "bert-base-cased",
                                       "--dataset", "wnut16", "--out", str(tmp_path / "out")])
    assert one_usage_error(result) == (
        "Error: --cache names the entry itself; --model and --dataset pick one by what it was made from: give one "
        "or the other"), result.output


def test_a_token_file_without_server_and_an_empty_export_out_are_one_line(tiny_cache, tmp_path):
    """`extract --token-file F` without --server extracted here, the file read by no one; `export --out ''`
    said only "No such file or directory"."""
    from layerfuse.cli.main import main

    token = tmp_path / "token"
    token.write_text("t\n")
    ran = CliRunner().invoke(extract_main, ["--token-file", str(token), "--cache-dir", str(tmp_path / "root")])
    assert one_usage_error(ran) == "Error: --token-file goes with --server (the service's " \
        "write token)", ran.output
    empty = CliRunner().invoke(main, ["export", tiny_cache, "--out", ""])
    assert one_usage_error(empty) == "Error: --out is empty: name the folder to write the " \
        "model to", empty.output
