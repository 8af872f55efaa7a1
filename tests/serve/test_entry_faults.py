"""Faults of a served entry as a remote reader meets them: a chunk file lost on the server is a 404,
which zarr alone reads as "never written" (zeros); the reader makes it an error naming the chunk."""

from __future__ import annotations

import os

import pytest

from layerfuse.cache.reader import open_entry
from layerfuse.errors import LayerfuseError


def test_a_chunk_lost_on_the_server_is_an_error_over_http(served, served_root, tiny_cache):
    name = os.path.basename(tiny_cache)
    remote = open_entry(f"{served.url}/entries/{name}").split("train")
    remote.hidden(layers=[1])  # intact: reads
    os.remove(served_root / name / "train" / "hidden" / "c" / "2" / "0" / "0")
    with pytest.raises(LayerfuseError, match=r"array train/hidden, chunk c/2/0/0 is missing"):
        open_entry(f"{served.url}/entries/{name}").split("train").hidden(layers=[1])
    os.remove(served_root / name / "train" / "labels" / "c" / "0")
    with pytest.raises(LayerfuseError, match=r"array train/labels, chunk c/0 is missing"):
        open_entry(f"{served.url}/entries/{name}").split("train").labels  # noqa: B018


def test_an_entry_killed_between_splits_is_not_served(served, served_root, tiny_cache):
    import shutil

    from .test_entries import get_json, request

    name = os.path.basename(tiny_cache)
    shutil.rmtree(served_root / name / "test")  # as left by a run killed once dev was written
    status, entries = get_json(served.url, "/api/entries")
    assert status == 200 and [(e["name"], e["complete"], e["missing_splits"]) for e in entries] == [
        (name, False, ["test"])]
    assert request(served.url, f"/entries/{name}/zarr.json")[0] == 404
