"""An MLM extraction killed with SIGKILL between units resumes and ends bitwise identical to an
uninterrupted run (the masks, labels, input ids and LM weights included), like NER's (test_resume.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import zarr
from conftest import kill_mid_extraction, slow_extract_child

from layerfuse.extract.run import ExtractConfig, extract

CHILD = slow_extract_child(', task="mlm", block_size=16, mask_seed=7')



def _arrays(path: str) -> dict[str, np.ndarray]:
    root = zarr.open_group(path, mode="r")
    return {f"{group}/{name}": arr[:] for group in ("train", "lm") for name, arr in root[group].arrays()}


@pytest.mark.slow
def test_mlm_sigkill_then_resume_is_bitwise_identical(tiny_bert_dir, tmp_path):
    from test_mlm_extract import write_corpus

    data = write_corpus(tmp_path / "corpus", docs=160)
    config = dict(model=str(tiny_bert_dir), dataset=str(data), unit_rows=256, splits=("train",), task="mlm",
                  block_size=16, mask_seed=7)
    reference = extract(ExtractConfig(cache_dir=str(tmp_path / "ref"), **config), progress=False).path
    n_units = zarr.open_group(reference, mode="r")["train"]["done"].shape[0]
    assert n_units >= 5
    root = str(tmp_path / "killed")
    path = reference.replace(str(tmp_path / "ref"), root)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.path.dirname(__file__),
                                                        os.path.dirname(os.path.dirname(__file__))])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_bert_dir), str(data), root, "1.5"], env=env)
    kill_mid_extraction(child, path, after_units=2, n_units=n_units)
    logs = []
    resumed = extract(ExtractConfig(cache_dir=root, **config), progress=False, log=logs.append)
    assert resumed.path == path and any("resuming train" in m for m in logs)
    got, want = _arrays(path), _arrays(reference)
    assert got.keys() == want.keys() and {"train/labels", "train/input_ids", "lm/embeddings"} <= set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
