"""Fixtures the training tests share: the tiny cache's entry and its data, opened and loaded once
per module (a module with other data defines its own)."""

from __future__ import annotations

import pytest

from layercache.cache.reader import open_entry
from layercache.training import load_data


@pytest.fixture(scope="module")
def entry(tiny_cache):
    return open_entry(tiny_cache)


@pytest.fixture(scope="module")
def data(entry):
    return load_data(entry)
