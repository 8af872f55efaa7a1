"""Faults injected into a finished entry (a lost chunk file, a damaged zarr.json, a flipped byte in a
small array): every read, `verify`, `ls` and `train-head` end in one line naming the file, array and
chunk, never a traceback, and never zeros standing in for the lost data."""

from __future__ import annotations

import os
import shutil

import pytest
from cli_output import one_error_line
from click.testing import CliRunner

from layerfuse.cache.manage import verify
from layerfuse.cache.reader import open_entry
from layerfuse.cli.main import main
from layerfuse.errors import LayerfuseError


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
    with pytest.raises(LayerfuseError, match=rf"array train/{array}, chunk {chunk} is missing"):
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


def train_head(entry: str, tmp_path):
    return CliRunner().invoke(main, ["train-head", "--cache", entry, "--fusion", "concat", "--shots", "2",
                                     "--epochs", "1", "--out", str(tmp_path / "run")])


def test_a_flipped_byte_in_labels_stops_train_head_with_one_line(entry_copy, tmp_path):
    chunk = os.path.join(entry_copy, "train", "labels", "c", "0")
    data = bytearray(open(chunk, "rb").read())
    data[10] ^= 0x01
    open(chunk, "wb").write(data)
    assert "array train/labels, chunk (0) fails its crc32c checksum" in one_error_line(train_head(entry_copy, tmp_path))


@pytest.mark.filterwarnings("ignore:Object at:UserWarning")  # zarr, of the folder left without its zarr.json
def test_a_deleted_array_metadata_is_one_line_everywhere(entry_copy, tmp_path):
    os.remove(os.path.join(entry_copy, "train", "hidden", "zarr.json"))
    message = "array train/hidden is missing (no train/hidden/zarr.json)"
    assert message in one_error_line(train_head(entry_copy, tmp_path))
    assert message in one_error_line(CliRunner().invoke(main, ["info", entry_copy]))
    assert any(message in p for p in verify(entry_copy))


def test_a_corrupt_split_metadata_is_one_line_and_hides_no_other_entry(entry_copy, tmp_path):
    root = os.path.dirname(entry_copy)
    intact = os.path.join(root, "intact")
    shutil.copytree(entry_copy, intact)
    meta = os.path.join(entry_copy, "train", "zarr.json")
    data = bytearray(open(meta, "rb").read())
    data[40] = 0xFF  # not UTF-8 any more
    open(meta, "wb").write(data)
    message = f"{entry_copy}/train/zarr.json is corrupt: not valid JSON"
    ls = CliRunner().invoke(main, ["ls", "--cache-dir", root])
    assert message in one_error_line(ls) and intact in ls.output
    assert message in one_error_line(train_head(entry_copy, tmp_path))
    assert message in one_error_line(CliRunner().invoke(main, ["info", entry_copy]))
    assert message in one_error_line(CliRunner().invoke(main, ["verify", entry_copy]))


def _edit_json(path: str, edit) -> None:
    import json

    with open(path, encoding="utf-8") as f:
        meta = json.load(f)
    edit(meta)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f)


def _grow(meta, by):
    meta["shape"][0] += by


def _rename_label(meta):
    names = meta["attributes"]["label_names"]
    names[1] = names[1] + "X"


# Metadata that stays valid JSON but lies: the hidden array one row longer, the offsets one shorter, a label
# name edited. The chunks' checksums hold; the split's completion record tells.
@pytest.mark.parametrize("file, edit, needle", [
    ("train/hidden/zarr.json", lambda m: _grow(m, 1), "array train/hidden has shape"),
    ("dev/offsets/zarr.json", lambda m: _grow(m, -1), "array dev/offsets has shape"),
    ("zarr.json", _rename_label, "label names of split"),
], ids=["hidden-shape", "offsets-shape", "label-name"])
def test_metadata_that_lies_is_one_line_in_verify_and_train_head(entry_copy, tmp_path, file, edit, needle):
    _edit_json(os.path.join(entry_copy, file), edit)
    problems = verify(entry_copy)
    assert len(problems) >= 1 and all(needle in p for p in problems), problems
    assert needle in one_error_line(train_head(entry_copy, tmp_path))


_SLOW_READS = """
import asyncio, sys
from zarr.storage import LocalStore
real = LocalStore.get
async def slow(self, key, *args, **kwargs):  # a large entry: other chunks still on their way
    if "/c/" in key:
        await asyncio.sleep(0.3)
    return await real(self, key, *args, **kwargs)
LocalStore.get = slow
from layerfuse.cli.main import main
main(sys.argv[1:])
"""


def test_a_lost_chunk_under_reads_in_flight_is_one_line_without_asyncio_noise(entry_copy, tmp_path):
    """Reads still in flight when one chunk is found missing were destroyed with the event loop at exit:
    hundreds of "Task was destroyed but it is pending" / "Event loop is closed" lines after the error."""
    import subprocess
    import sys

    os.remove(os.path.join(entry_copy, "train", "hidden", "c", "0", "0", "0"))
    env = {**os.environ, "ZARR_ASYNC__CONCURRENCY": "2"}
    done = subprocess.run([sys.executable, "-c", _SLOW_READS, "train-head", "--cache", entry_copy, "--fusion", "concat",
                           "--shots", "all", "--epochs", "1", "--quiet", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "array train/hidden, chunk c/0/0/0 is missing" in lines[0], lines[:20]


def test_verify_of_a_deleted_array_metadata_prints_no_zarr_warning(entry_copy):
    """zarr warns of the folder left without its zarr.json ("Object at hidden is not recognized as a
    component of a Zarr hierarchy", two lines on stderr); verify names that array in its own line."""
    import warnings

    os.remove(os.path.join(entry_copy, "train", "hidden", "zarr.json"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problems = verify(entry_copy)
    assert [str(w.message) for w in caught] == []
    assert f"{entry_copy}: array train/hidden is missing (no train/hidden/zarr.json)" in problems


def test_ls_and_info_never_call_an_entry_verify_fails_complete(entry_copy):
    """A chunk file lost: `ls` and `info` once listed every split as complete; they check, without
    reading a chunk, that every listed file is there, and say what they did not check."""
    root = os.path.dirname(entry_copy)
    intact = os.path.join(root, "intact")
    shutil.copytree(entry_copy, intact)
    info = CliRunner().invoke(main, ["info", intact])
    assert info.exit_code == 0 and "chunks not read (`layerfuse verify` reads them)" in info.output
    os.remove(os.path.join(entry_copy, "train", "hidden", "c", "1", "0", "0"))
    message = "array train/hidden, chunk c/1/0/0 is missing"
    info = CliRunner().invoke(main, ["info", entry_copy])
    assert message in one_error_line(info)
    train_line = next(line for line in info.output.splitlines() if line.lstrip().startswith("train "))
    assert "DAMAGED" in train_line and "complete" not in train_line
    ls = CliRunner().invoke(main, ["ls", "--cache-dir", root])
    assert message in one_error_line(ls) and intact in ls.output and "damaged: 1 problem" in ls.output


def _huge(meta):
    meta["shape"][0] = 2**38


def _huge_recorded(meta):
    meta["attributes"]["arrays"]["hidden"]["shape"][0] = 2**38


def _files_outside(meta):
    meta["attributes"]["files"]["labels"] = ["../../../../outside.txt"]


def _sets_as_a_list(meta):
    meta["attributes"]["label_sets"] = ["pos"]


# Someone else's entry, edited: each is named in a line, and `ls` goes on to list the root's other entries.
@pytest.mark.parametrize("edits, needle", [
    ([("train/hidden/zarr.json", _huge), ("train/zarr.json", _huge_recorded)], "declares 274,877,906,944 rows"),
    ([("train/zarr.json", _files_outside)], "lists files outside it"),
    ([("zarr.json", _sets_as_a_list)], "its metadata is not as written"),
], ids=["huge-shape", "files-outside", "sets-as-a-list"])
def test_an_edited_entry_is_named_not_followed(entry_copy, edits, needle):
    """A declared shape of 2**38 rows made `ls` list 10**9 shard keys (a hang); files listed outside the entry
    were looked for; a listing of another type was a traceback that hid every other entry of the root."""
    import time

    for file, edit in edits:
        _edit_json(os.path.join(entry_copy, file), edit)
    started = time.monotonic()
    problems = verify(entry_copy)
    assert any(needle in p for p in problems), problems
    listed = CliRunner().invoke(main, ["ls", "--cache-dir", os.path.dirname(entry_copy)])
    assert needle in listed.output and "on tiny_conll" in listed.output, listed.output  # listed, damage named
    assert time.monotonic() - started < 60
    if needle.startswith("declares"):  # trained on without a word before
        with pytest.raises(LayerfuseError, match=needle):
            open_entry(entry_copy).split("train")
