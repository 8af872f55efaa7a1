"""Without --cache, --model or --dataset, `train-head` trains on the built-in default (as `extract` makes
it), or on the root's only entry; a root of several others is an error listing them. The entry extracted
last never decides (it once did: after an unrelated extraction the README's command trained on it)."""

from __future__ import annotations

import os
import shutil

import pytest
import zarr
from cli_output import one_error_line
from click.testing import CliRunner

from layerfuse.cli.train import main as train_head
from layerfuse.experiments import find


def _copy(tiny_cache, root, name, **attrs) -> str:
    """A copy of the tiny entry under ``root``, its attributes changed (and the time it finished)."""
    path = os.path.join(root, name)
    shutil.copytree(tiny_cache, path)
    group = zarr.open_group(path, mode="r+")
    group.attrs.update(attrs.pop("meta", {}))
    for split in group.group_keys():
        group[split].attrs["finished"] = attrs["finished"]
    return path


@pytest.fixture
def two_entries(tiny_cache, tmp_path):
    root = tmp_path / "root"
    old = _copy(tiny_cache, root, "a", finished="2001-01-01T00:00:00+0000")
    new = _copy(tiny_cache, root, "b", finished="2002-01-01T00:00:00+0000", meta={"dataset": "other"})
    return str(root), old, new


def test_several_entries_and_no_default_is_one_line_listing_them(two_entries):
    root, old, new = two_entries
    result = CliRunner().invoke(train_head, ["--cache-dir", root, "--dry-run"])
    line = one_error_line(result)
    assert "which entry?" in line and f"--cache {old}" in line and f"--cache {new}" in line
    assert "none of the default (all-MiniLM-L6-v2 on wnut16)" in line


def test_the_only_entry_is_used_and_named(tiny_cache, tmp_path):
    root = tmp_path / "root"
    only = _copy(tiny_cache, root, "only", finished="2001-01-01T00:00:00+0000")
    result = CliRunner().invoke(train_head, ["--cache-dir", str(root), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"using the only complete ner cache entry under {root}" in result.stderr and only in result.stderr


def test_the_default_is_meant_even_when_another_entry_is_newer(two_entries, tiny_cache, monkeypatch):
    root, _, newest = two_entries
    _copy(tiny_cache, root, "default", finished="2000-01-01T00:00:00+0000",
          meta={"model": "all-MiniLM-L6-v2", "dataset": "wnut16"})
    asked = []
    monkeypatch.setattr(find, "_entry_for", lambda **kw: asked.append(kw) or "the default's entry")
    assert find.resolve_entry(cache_dir=root, log=lambda m: None) == "the default's entry"
    assert [(kw["model"], kw["dataset"]) for kw in asked] == [(None, None)]  # what `extract` alone makes


def test_a_root_of_many_entries_names_a_few_and_counts_the_rest(tiny_cache, tmp_path):
    """A root of 301 entries made the "which entry?" line 37 KB long, one --cache path an entry."""
    root = tmp_path / "root"
    for i in range(8):
        _copy(tiny_cache, root, f"e{i}", finished=f"200{i}-01-01T00:00:00+0000", meta={"dataset": f"data{i}"})
    line = one_error_line(CliRunner().invoke(train_head, ["--cache-dir", str(root), "--dry-run"]))
    assert "holds 8 complete" in line and line.count("--cache ") == 6  # five named, and "--cache PATH" once
    assert "and 3 more (`layerfuse ls` lists them all)" in line


def test_entries_of_another_primary_set_are_said_so_and_told_apart(tiny_cache, tmp_path):
    """Two POS entries of one model and dataset, read with other --columns: "2 complete pos entries" (not
    "ner"), each listed with the data fingerprint `ls` tells them apart by; entries of several primary sets
    are each named with theirs."""
    root = tmp_path / "root"
    for name, fingerprint in (("a", "a" * 24), ("b", "b" * 24)):
        _copy(tiny_cache, root, name, finished="2001-01-01T00:00:00+0000",
              meta={"primary_labels": "pos", "primary_kind": "token", "dataset_fingerprint": fingerprint})
    line = one_error_line(CliRunner().invoke(train_head, ["--cache-dir", str(root), "--dry-run"]))
    assert "holds 2 complete pos entries" in line, line
    assert f"data {'a' * 24}]: --cache {root / 'a'}" in line and f"data {'b' * 24}]: --cache {root / 'b'}" in line
    _copy(tiny_cache, root, "c", finished="2001-01-01T00:00:00+0000", meta={"dataset": "other"})
    line = one_error_line(CliRunner().invoke(train_head, ["--cache-dir", str(root), "--dry-run"]))
    assert "holds 3 complete entries" in line and ", pos labels [" in line and ", ner labels [" in line, line
