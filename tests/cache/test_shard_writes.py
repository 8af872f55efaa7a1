"""LAYERFUSE_SHARD_WRITES, the writer's setting for measuring what writing costs
(scripts/bench_extract.py --where): zarr's own pipeline writes the bytes the direct shard writer
does; a value it does not know stops the extraction."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import split_arrays

from layerfuse.cache.writer import WRITES_ENV
from layerfuse.extract.run import ExtractConfig, extract


def _extract(tiny_bert_dir, tiny_conll_dir, root):
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(root), unit_rows=256)
    return extract(config, progress=False, log=lambda m: None).path


def test_zarr_pipeline_writes_the_same_bytes(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch):
    direct = _extract(tiny_bert_dir, tiny_conll_dir, tmp_path / "direct")
    monkeypatch.setenv(WRITES_ENV, "zarr")
    through_zarr = _extract(tiny_bert_dir, tiny_conll_dir, tmp_path / "zarr")
    want, got = split_arrays(direct), split_arrays(through_zarr)
    assert want.keys() == got.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_an_unknown_value_stops_the_extraction(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(WRITES_ENV, "fast")
    with pytest.raises(ValueError, match=WRITES_ENV):
        _extract(tiny_bert_dir, tiny_conll_dir, tmp_path)
