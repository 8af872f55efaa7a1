"""The direct shard writer stores exactly the bytes zarr's own sharding codec stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from layerfuse.cache.shard import shard_files
from layerfuse.cache.store import CHECKSUM


def _hidden(root, name, *, n_rows, dtype, shard_rows=64, inner_rows=16, layers=3, d=8):
    g = zarr.open_group(str(root / name), mode="w")
    a = g.create_array("hidden", shape=(n_rows, layers, d), dtype=dtype, shards=(shard_rows, layers, d),
                       chunks=(inner_rows, 1, d), compressors=[CHECKSUM], fill_value=0)
    return a.with_config({"write_empty_chunks": True})


@pytest.mark.parametrize("dtype", ["float16", "uint16", "float32", "int8"])
def test_shards_match_zarr_byte_for_byte(tmp_path, dtype):
    n_rows = 64 * 2 + 37  # two full shards and a partial one (a partial inner chunk, absent chunks)
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((n_rows, 3, 8)) * (30 if dtype == "int8" else 1000)).astype(dtype)
    ours, theirs = (_hidden(tmp_path, name, n_rows=n_rows, dtype=dtype) for name in ("ours", "zarr"))
    files = shard_files(ours)
    assert (files.shard_rows, files.inner_rows) == (64, 16)
    for shard in (2, 0, 1):  # the partial shard first: the kept buffer then grows
        lo, hi = shard * 64, min((shard + 1) * 64, n_rows)
        files.write(shard, data[lo:hi])
        theirs[lo:hi] = data[lo:hi]
    for shard in range(3):
        key = f"hidden/c/{shard}/0/0"
        assert (tmp_path / "ours" / key).read_bytes() == (tmp_path / "zarr" / key).read_bytes(), key
    np.testing.assert_array_equal(zarr.open_group(str(tmp_path / "ours"), mode="r")["hidden"][:], data)


def test_a_flipped_byte_is_caught_on_read(tmp_path):
    a = _hidden(tmp_path, "ours", n_rows=64, dtype="float16")
    shard_files(a).write(0, np.ones((64, 3, 8), dtype="float16"))
    path = tmp_path / "ours" / "hidden" / "c" / "0" / "0" / "0"
    raw = bytearray(path.read_bytes())
    raw[100] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="checksum"):
        zarr.open_group(str(tmp_path / "ours"), mode="r")["hidden"][:]


def test_other_layouts_go_through_zarr(tmp_path):
    g = zarr.open_group(str(tmp_path / "plain"), mode="w")
    unsharded = g.create_array("a", shape=(64, 3, 8), dtype="float16", chunks=(16, 1, 8), compressors=[CHECKSUM])
    assert shard_files(unsharded) is None
    wide = g.create_array("b", shape=(64, 3, 8), dtype="float16", shards=(64, 3, 8), chunks=(16, 3, 8),
                          compressors=[CHECKSUM])
    assert shard_files(wide) is None  # inner chunks of several layers: not the cache's layout
    assert shard_files(zarr.open_group("memory://x", mode="w").create_array(
        "c", shape=(64, 3, 8), dtype="float16", shards=(64, 3, 8), chunks=(16, 1, 8), compressors=[CHECKSUM])) is None


@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_extract_writes_the_bytes_zarr_would(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch, dtype):
    """`extract` on a local root takes the direct path, and its shards equal those zarr writes."""
    import layerfuse.cache.writer as writer
    from layerfuse.extract.run import ExtractConfig, extract

    written = []
    files = writer.shard_files

    def spying(array):
        found = files(array)
        written.append(found is not None)
        return found

    def run(root):
        config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(root),
                               unit_rows=256, dtype=dtype)
        return extract(config, progress=False, log=lambda m: None).path

    monkeypatch.setattr(writer, "shard_files", spying)
    ours = run(tmp_path / "direct")
    assert written and all(written)
    monkeypatch.setattr(writer, "shard_files", lambda array: None)  # zarr's own pipeline
    theirs = run(tmp_path / "zarr")
    shards = sorted(p.relative_to(ours) for p in Path(ours).glob("*/hidden/c/*/0/0"))
    assert len(shards) > 3
    for shard in shards:
        assert (Path(ours) / shard).read_bytes() == (Path(theirs) / shard).read_bytes(), shard
