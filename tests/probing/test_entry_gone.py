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
