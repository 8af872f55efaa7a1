"""The dataset format registry: a format declared and registered here, in this file alone, is read by
`load_dataset`, extracted by `extract` and listed in its --dataset help."""

from pathlib import Path

import pytest
from cli_output import one_error_line
from click.testing import CliRunner

from layerfuse.errors import LayerfuseError
from layerfuse.extract.datasets import Reading, load_dataset
from layerfuse.extract.formats import DatasetFormat, Request, formats, help_text, register, unregister


def _load_toy(request: Request):
    """One sentence a line, each token ``word/TAG``; a blank line ends the train split, the rest is dev."""
    train, _, dev = request.path.read_text(encoding="utf-8").partition("\n\n")
    raw = {split: [([t.rsplit("/", 1)[0] for t in line.split()], [t.rsplit("/", 1)[1] for t in line.split()])
                   for line in text.splitlines() if line.strip()]
           for split, text in (("train", train), ("dev", dev))}
    return request.tagged(name=request.path.stem, source=str(request.path), raw=raw)


TOY = DatasetFormat(name="toy", help="a .toy file (word/TAG tokens)",
                    claims=lambda request: request.path.suffix == ".toy" and request.path.is_file(),
                    load=_load_toy, what="a toy file")


@pytest.fixture
def toy_format():
    register(TOY)
    yield TOY
    unregister(TOY.name)


@pytest.fixture
def toy_file(tmp_path) -> Path:
    path = tmp_path / "tiny.toy"
    path.write_text("Alice/B-PER met/O Bob/B-PER\nin/O Paris/B-LOC\n\nBonn/B-LOC said/O\n", encoding="utf-8")
    return path


def test_a_registered_format_is_read_by_load_dataset(toy_format, toy_file):
    data = load_dataset(str(toy_file))
    assert data.name == "tiny" and data.source == str(toy_file)
    assert data.splits["train"] == [(["Alice", "met", "Bob"], ["B-PER", "O", "B-PER"]),
                                    (["in", "Paris"], ["O", "B-LOC"])]
    assert data.splits["dev"] == [(["Bonn", "said"], ["B-LOC", "O"])]
    assert data.entity_types == ["LOC", "PER"]


def test_a_registered_format_comes_before_the_catch_alls(toy_format):
    names = [fmt.name for fmt in formats()]
    assert names.index("toy") < names.index("conll-file")  # a CoNLL-style file would claim any file


def test_a_registered_format_refuses_options_it_does_not_take(toy_format, toy_file):
    with pytest.raises(LayerfuseError, match="--columns names the columns of CoNLL-style files; .* is a toy file"):
        load_dataset(str(toy_file), read=Reading(columns="word=0,ner=1"))


def test_a_registered_format_is_in_the_help(toy_format):
    from layerfuse.cli.extract import main

    assert "a .toy file (word/TAG tokens)" in help_text()
    out = CliRunner().invoke(main, ["--help"], terminal_width=400)
    assert out.exit_code == 0 and "a .toy file (word/TAG tokens)" in out.output


def test_the_help_lists_every_format_once_the_toy_is_gone(toy_file):
    register(TOY)
    unregister(TOY.name)
    assert "toy" not in help_text()
    with pytest.raises(LayerfuseError, match="tiny.toy"):  # a CoNLL-style file again: no tag column
        load_dataset(str(toy_file))


def test_extract_reads_a_registered_format(toy_format, toy_file, tmp_path, tiny_bert_dir):
    from layerfuse.cli.extract import main

    args = ["--model", str(tiny_bert_dir), "--dataset", str(toy_file), "--cache-dir", str(tmp_path / "cache"),
            "--quiet"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    assert "cached: " in out.output
    assert "a toy file" in one_error_line(CliRunner().invoke(main, [*args, "--columns", "word=0,ner=1"]))
