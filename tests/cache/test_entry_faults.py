"""Faults injected into a finished entry (a lost chunk file, a damaged zarr.json, a flipped byte in a
small array): every read, `verify`, `ls` and `train-head` end in one line naming the file, array and
chunk, never a traceback, and never zeros standing in for the lost data."""

from __future__ import annotations

import os
import shutil

import pytest
from click.testing import CliRunner

from layercache.cache.manage import verify
from layercache.cache.reader import open_entry
from layercache.cli.main import main
from layercache.errors import LayercacheError


@pytest.fixture
def entry_copy(tiny_cache, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    dst = root / os.path.basename(tiny_cache)
    shutil.copytree(tiny_cache, dst)
    return str(dst)


def one_error_line(result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]


# What each lost chunk would have read as without the entry's file list: zeros for hidden states,
# label 0 everywhere, an empty split from all-zero offsets.
@pytest.mark.parametrize("array, chunk, read", [
    ("hidden", "c/1/0/0", lambda split: split.hidden(layers=[1])),
    ("labels", "c/0", lambda split: split.labels),
    ("offsets", "c/0", lambda split: split.n_sentences),
    ("words", "c/0", lambda split: split.words([0])),
])
def test_a_lost_chunk_file_is_an_error_never_zeros(entry_copy, array, chunk, read):
    os.remove(os.path.join(entry_copy, "train", array, *chunk.split("/")))
    with pytest.raises(LayercacheError, match=rf"array train/{array}, chunk {chunk} is missing"):
        read(open_entry(entry_copy).split("train"))
    problems = verify(entry_copy)
    assert problems == [f"{entry_copy}: array train/{array}, chunk {chunk} is missing (file train/{array}/{chunk})"]
    out = CliRunner().invoke(main, ["verify", entry_copy])
    assert out.exit_code == 1 and f"train/{array}, chunk {chunk} is missing" in out.output


def test_train_head_on_a_lost_hidden_chunk_stops_with_one_line(entry_copy, tmp_path):
    os.remove(os.path.join(entry_copy, "train", "hidden", "c", "0", "0", "0"))
    out = CliRunner().invoke(main, ["train-head", "--cache", entry_copy, "--fusion", "concat", "--shots", "2",
                                    "--epochs", "1", "--out", str(tmp_path / "run")])
    assert "array train/hidden, chunk c/0/0/0 is missing" in one_error_line(out)
