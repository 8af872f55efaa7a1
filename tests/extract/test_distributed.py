"""`torchrun --nproc-per-node 2 extract ...` (gloo on CPU) writes the same bytes as one process."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import zarr

from layerfuse.extract.run import ExtractConfig, extract

pytestmark = pytest.mark.slow  # starts torchrun


def test_two_process_gloo_extraction_equals_single_process(tiny_bert_dir, tiny_conll_dir, tmp_path):
    single = extract(ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir),
                                   cache_dir=str(tmp_path / "one"), unit_rows=256), progress=False).path
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "layerfuse.cli.extract", "--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir),
           "--cache-dir", str(tmp_path / "two"), "--unit-rows", "256", "--quiet"]
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("cached:") == 1  # only rank 0 reports
    multi = single.replace(str(tmp_path / "one"), str(tmp_path / "two"))
    a, b = zarr.open_group(single, mode="r"), zarr.open_group(multi, mode="r")
    for split in ("train", "dev", "test"):
        assert b[split].attrs["complete"] and b[split].attrs["processes"] == 2
        for name, arr in a[split].arrays():
            np.testing.assert_array_equal(b[split][name][:], arr[:], err_msg=f"{split}/{name}")
