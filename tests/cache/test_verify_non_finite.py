"""`verify` reports non-finite hidden values, one line per split and layer, beside checksum problems:
a checksum only proves the bytes are the ones written, and an overflow written as inf passes it."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from layerfuse.cache.manage import verify
from layerfuse.cli.main import main
from layerfuse.extract.run import ExtractConfig, extract


@pytest.fixture(scope="module")
def bf16_cache(tmp_path_factory, tiny_bert_dir, tiny_conll_dir) -> str:
    root = tmp_path_factory.mktemp("bf16")
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(root), unit_rows=256,
                           splits=("train", "dev"), dtype="bfloat16")
    return extract(config, progress=False, log=lambda m: None).path


@pytest.mark.parametrize("source", ["tiny_cache", "bf16_cache"])  # float16 / bfloat16 (stored as uint16 bits)
def test_verify_reports_non_finite_hidden_values(source, request, tmp_path):
    entry = str(tmp_path / os.path.basename(request.getfixturevalue(source)))
    shutil.copytree(request.getfixturevalue(source), entry)
    assert verify(entry) == []

    hidden = zarr.open_group(entry, mode="a")["train"]["hidden"]  # rewritten through zarr: checksums stay valid
    bfloat16 = hidden.dtype == np.uint16
    inf, nan = (np.uint16(0x7F80), np.uint16(0xFFC0)) if bfloat16 else (np.inf, np.nan)
    block = hidden[300:303, 2, :4]
    block[:] = inf  # 12 values of layer 2 in the second shard
    hidden[300:303, 2, :4] = block
    hidden[1000, 0, 5] = nan  # one value of layer 0 in another shard
    if bfloat16:  # the largest finite bfloat16 (exponent 0xFE) is not counted
        hidden[5, 1, 0] = np.uint16(0x7F7F)

    problems = verify(entry)
    assert problems == [
        f"{entry}: split train, layer 0 (0 = embeddings): 1 non-finite hidden values (inf or nan)",
        f"{entry}: split train, layer 2 (0 = embeddings): 12 non-finite hidden values (inf or nan)",
    ]
    out = CliRunner().invoke(main, ["verify", entry])
    assert out.exit_code == 1 and "split train, layer 2" in out.output and "2 problems" in out.output


def test_verify_reports_both_corruption_and_non_finite(tiny_cache, tmp_path):
    entry = str(tmp_path / os.path.basename(tiny_cache))
    shutil.copytree(tiny_cache, entry)
    hidden = zarr.open_group(entry, mode="a")["dev"]["hidden"]
    hidden[0, 1, 0] = np.inf
    shard = os.path.join(entry, "train", "hidden", "c", "1", "0", "0")
    data = bytearray(open(shard, "rb").read())
    data[100] ^= 0x01
    open(shard, "wb").write(data)
    problems = verify(entry)
    assert len(problems) == 2
    assert "array train/hidden, chunk (1, 0, 0)" in problems[0]
    assert problems[1].endswith("split dev, layer 1 (0 = embeddings): 1 non-finite hidden values (inf or nan)")
