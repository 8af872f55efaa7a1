"""The int8 storage format: per-vector absmax scales, the round-trip bound, and `verify` on an int8
entry (checksums of the int8 chunks and of the scales, non-finite scales counted)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import zarr

from layerfuse.cache.codec import CODECS, SCALES
from layerfuse.cache.manage import verify
from layerfuse.cache.reader import open_entry
from layerfuse.errors import LayerfuseError
from layerfuse.extract.run import ExtractConfig, extract

INT8 = CODECS["int8"]


def test_round_trip_is_within_half_a_step_of_each_vector():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 4, 64)).astype(np.float32) * rng.uniform(1e-4, 1e3, (50, 4, 1)).astype(np.float32)
    x[3, 1] = 0  # an all-zero vector: scale 1, stored as zeros
    x[7, 2, 5] = -40.0  # one outlier sets its vector's scale
    q, s = INT8.encode(x)
    assert q.dtype == np.int8 and s.dtype == np.float32 and s.shape == (50, 4)
    assert s[3, 1] == 1 and not q[3, 1].any()
    assert np.abs(q).max() <= 127 and (np.abs(q).max(axis=-1)[np.arange(50) != 3] == 127).all()
    bound = np.abs(x).max(axis=-1, keepdims=True) / 254  # = s / 2
    err = np.abs(x - INT8.decode(q, s))
    assert (err <= bound * (1 + 1e-4)).all(), float((err / np.maximum(bound, 1e-30)).max())


def test_the_rule_is_symmetric_absmax_round_half_even():
    x = np.array([[[127.0, -63.5, 0.49, -127.0, 64.5]]], np.float32)  # max |x| = 127: s = 1
    q, s = INT8.encode(x)
    assert s.tolist() == [[1.0]] and q.tolist() == [[[127, -64, 0, -127, 64]]]


@pytest.fixture(scope="module")
def int8_cache(tmp_path_factory, tiny_bert_dir, tiny_conll_dir) -> str:
    root = tmp_path_factory.mktemp("int8")
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(root), unit_rows=256,
                           splits=("train", "dev"), dtype="int8")
    return extract(config, progress=False, log=lambda m: None).path


def test_the_reader_returns_float16_dequantised(int8_cache):
    split = open_entry(int8_cache).split("train")
    group = zarr.open_group(int8_cache, mode="r")["train"]
    q, s = group["hidden"][:], group[SCALES][:]
    assert q.dtype == np.int8 and s.dtype == np.float32 and s.shape == q.shape[:2]
    exact = INT8.decode(q, s)
    h = split.hidden()
    assert h.dtype == np.float16
    np.testing.assert_array_equal(h, exact.astype(np.float16))
    np.testing.assert_array_equal(split.hidden(dtype=np.float32), exact)
    some = split.hidden(sentences=[5, 2], layers=[2, 0], dtype=np.float32)
    np.testing.assert_array_equal(some, exact[split.rows_of([5, 2])][:, [2, 0]])
    assert split.nbytes(rows=10, layers=3) == 10 * 3 * split.dim * 2


def test_verify_checks_int8_chunks_and_scales(int8_cache, tmp_path):
    entry = str(tmp_path / os.path.basename(int8_cache))
    shutil.copytree(int8_cache, entry)
    assert verify(entry) == []
    scales = zarr.open_group(entry, mode="a")["dev"][SCALES]  # rewritten through zarr: checksums stay valid
    scales[4, 1] = np.inf
    scales[9, 1] = np.nan
    assert verify(entry) == [f"{entry}: split dev, layer 1 (0 = embeddings): 2 non-finite int8 scales "
                             f"(inf or nan: those vectors read back non-finite)"]

    for chunk in (os.path.join(entry, "train", SCALES, "c", "1", "0"),  # the second unit's scales
                  os.path.join(entry, "train", "hidden", "c", "2", "0", "0")):  # the third unit's int8 rows
        data = bytearray(open(chunk, "rb").read())
        data[40] ^= 0x01
        open(chunk, "wb").write(data)
    problems = verify(entry)
    assert any(f"array train/{SCALES}, chunk (1, 0)" in p for p in problems), problems
    assert any("array train/hidden, chunk (2, 0, 0)" in p for p in problems), problems
    with pytest.raises(LayerfuseError, match=f"train/{SCALES}, chunk \\(1, 0\\) fails its crc32c"):
        split = open_entry(entry).split("train")
        split.hidden(sentences=[int(np.searchsorted(split.offsets, 300))], layers=[0])  # rows in the second unit
