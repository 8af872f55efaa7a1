"""A zarr.json that is valid JSON but not metadata zarr can read (a key renamed, a field missing): every
command ends in one line naming the file, as for one that is not JSON, and `ls` lists the other entries.
A damaged entry is removed by `rm`, which says so: it cannot be read, and re-extracting it would fail."""

from __future__ import annotations

import os
import shutil

import pytest
from cli_output import one_error_line
from click.testing import CliRunner

from layerfuse.cache.manage import remove
from layerfuse.cli.main import main
from layerfuse.errors import LayerfuseError


def _rename_key(path: str, old: str, new: str) -> None:
    """The first ``"old"`` key of the file renamed ``"new"``: still JSON, no longer zarr metadata."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert f'"{old}"' in text
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(f'"{old}"', f'"{new}"', 1))


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def _train_head(entry: str, tmp_path):
    return _invoke("train-head", "--cache", entry, "--fusion", "concat", "--shots", "2", "--epochs", "1",
                   "--out", str(tmp_path / "run"))


# The group of the entry, a split's group, an array: each read by zarr before anything of the entry is.
RENAMED = [
    ("zarr.json", "zarr_format", "zarr_formax"),
    ("zarr.json", "attributes", "attributas"),
    ("train/zarr.json", "attributes", "attributas"),
    ("train/hidden/zarr.json", "shape", "shapf"),
]
IDS = ["entry-format", "entry-attributes", "split-attributes", "array-shape"]


@pytest.mark.parametrize("file, old, new", RENAMED, ids=IDS)
def test_metadata_zarr_cannot_parse_is_one_line_naming_the_file(entry_copy, tmp_path, file, old, new):
    _rename_key(os.path.join(entry_copy, file), old, new)
    message = f"{entry_copy}/{file} is corrupt: not zarr metadata"
    for result in (_invoke("verify", entry_copy), _invoke("info", entry_copy), _train_head(entry_copy, tmp_path)):
        line = one_error_line(result)
        assert message in line and line.endswith("remove the entry (`layerfuse rm`) and extract it again"), line


@pytest.mark.parametrize("file, old, new", RENAMED, ids=IDS)
def test_ls_lists_every_entry_beside_one_zarr_cannot_parse(entry_copy, file, old, new):
    root = os.path.dirname(entry_copy)
    intact = os.path.join(root, "intact")
    shutil.copytree(entry_copy, intact)
    _rename_key(os.path.join(entry_copy, file), old, new)
    ls = _invoke("ls", "--cache-dir", root)
    assert f"{entry_copy}/{file} is corrupt: not zarr metadata" in one_error_line(ls)
    assert intact in ls.output


@pytest.mark.parametrize("damage", [
    lambda entry: open(os.path.join(entry, "zarr.json"), "w").close(),  # emptied: not JSON
    lambda entry: _rename_key(os.path.join(entry, "zarr.json"), "attributes", "attributas"),
    lambda entry: _rename_key(os.path.join(entry, "train", "zarr.json"), "attributes", "attributas"),
], ids=["entry-empty", "entry-attributes", "split-attributes"])
def test_rm_removes_a_damaged_entry_and_says_so(entry_copy, damage):
    damage(entry_copy)
    result = _invoke("rm", "--yes", entry_copy)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "damaged" in result.output and entry_copy in result.output
    assert not os.path.exists(entry_copy)
    assert os.listdir(os.path.dirname(entry_copy)) == []  # nothing left beside it either


def test_rm_of_an_entry_with_damaged_array_metadata_removes_it(entry_copy):
    _rename_key(os.path.join(entry_copy, "train", "hidden", "zarr.json"), "shape", "shapf")
    result = _invoke("rm", "--yes", entry_copy)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert not os.path.exists(entry_copy)


def test_rm_still_refuses_a_damaged_folder_not_named_as_an_entry(entry_copy):
    """A zarr.json that cannot be read tells nothing of whose folder it is: only the entry's name does."""
    other = os.path.join(os.path.dirname(entry_copy), "my-data")
    os.rename(entry_copy, other)
    open(os.path.join(other, "zarr.json"), "w").close()
    line = one_error_line(_invoke("rm", "--yes", other))
    assert f"{other}/zarr.json is corrupt" in line
    assert os.path.isfile(os.path.join(other, "zarr.json"))


def test_rm_of_a_damaged_entry_keeps_the_in_use_check(entry_copy):
    from layerfuse.cache.usage import hold

    open(os.path.join(entry_copy, "zarr.json"), "w").close()
    reader = hold(entry_copy)  # as a reader that opened it before the damage holds it
    try:
        assert "open by a reader" in one_error_line(_invoke("rm", "--yes", entry_copy))
    finally:
        reader.release()
    assert os.path.isdir(entry_copy)


def test_rm_of_a_missing_entry_is_still_refused(entry_copy):
    gone = entry_copy + "0"
    with pytest.raises(LayerfuseError, match="no cache entry"):
        remove(gone)
    assert "no cache entry" in one_error_line(_invoke("rm", "--yes", gone))


def test_an_entry_of_a_newer_format_is_refused_by_name(entry_copy, tmp_path):
    """An entry written by a newer layerfuse (format_version 7) was listed, verified and trained on as if
    this one could read its layout."""
    import zarr

    zarr.open_group(entry_copy, mode="r+").attrs["format_version"] = 7
    said = (f"error: {entry_copy} was written by a newer layerfuse (cache format 7; this one reads format 1): "
            "upgrade layerfuse (pip install -U layerfuse) to read it")
    assert one_error_line(_train_head(entry_copy, tmp_path)) == said
    listed = _invoke("ls", "--cache-dir", os.path.dirname(entry_copy))
    # said as a note, exit 0: not damaged, and `ls` of a root shared with someone who upgraded failed
    assert listed.exit_code == 0 and f"note: {said.removeprefix('error: ')}" in listed.output
    # not damaged: gc removed it first of all, as unreadable, while rm refused it (a root two releases share)
    _invoke("gc", "--max-size", "0", "--cache-dir", os.path.dirname(entry_copy))
    assert os.path.isfile(os.path.join(entry_copy, "zarr.json"))


def test_a_lost_shard_of_an_entry_from_before_file_lists_is_an_error_not_zeros(entry_copy):
    """An entry finished before splits listed their files: a shard of hidden deleted read back as zeros and
    `verify` said ok."""
    import json

    import numpy as np

    from layerfuse.cache.reader import open_entry

    for split in ("train", "dev", "test"):  # as an older release wrote the split's completion record
        meta_path = os.path.join(entry_copy, split, "zarr.json")
        meta = json.loads(open(meta_path, encoding="utf-8").read())
        for old in ("files", "ready", "arrays"):
            meta["attributes"].pop(old, None)
        open(meta_path, "w", encoding="utf-8").write(json.dumps(meta))
    before = open_entry(entry_copy).split("train").hidden(sentences=[0])
    assert np.abs(before).max() > 0
    os.remove(os.path.join(entry_copy, "train", "hidden", "c", "0", "0", "0"))
    with pytest.raises(LayerfuseError, match=r"array train/hidden, chunk c/0/0/0 is missing"):
        open_entry(entry_copy).split("train").hidden(sentences=[0])
    verified = _invoke("verify", entry_copy)
    assert verified.exit_code == 1 and "array train/hidden, chunk c/0/0/0 is missing" in verified.output
