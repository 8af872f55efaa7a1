"""What made `probe` once say "label set 'chunk' of ENTRY does not label the train split; it has []":
the entry's finished splits are listed live, so an entry removed (or rewritten) under a reader that
already read it listed no splits at all, and every label set then seemed to cover none. A finished
split never turns unfinished, so the reader now says what happened instead."""

from __future__ import annotations

import os
import shutil

import pytest

from layerfuse.cache.reader import open_entry
from layerfuse.errors import LayerfuseError
from layerfuse.probing.data import covered_splits


def test_an_entry_removed_under_a_reader_is_named_not_empty(tiny_cache, tmp_path):
    path = str(tmp_path / os.path.basename(tiny_cache))
    shutil.copytree(tiny_cache, path)
    entry = open_entry(path)
    assert covered_splits(entry, "pos") == ["train", "dev", "test"]  # the first set probes fine
    shutil.rmtree(path)  # `gc` or `rm` meanwhile
    with pytest.raises(LayerfuseError, match="train, dev, test were finished when read and are gone"):
        covered_splits(entry, "chunk")


def test_a_split_opened_then_removed_is_named_gone_in_a_view(tiny_cache, tmp_path):
    """A split opened (not listed) before the entry was removed read as "it has []" in a view of it."""
    path = str(tmp_path / os.path.basename(tiny_cache))
    shutil.copytree(tiny_cache, path)
    entry = open_entry(path)
    entry.split("train")
    view = entry.with_labels("pos")
    shutil.rmtree(path)
    with pytest.raises(LayerfuseError, match="train were finished when read and are gone"):
        view.split("train")
