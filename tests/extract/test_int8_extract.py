"""`extract --dtype int8`: the stored values are the float32 extraction quantised vector by vector, a
killed run resumes bit for bit, a head trains on it, and `--dry-run` counts its bytes."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import zarr
from conftest import kill_mid_extraction, scaled_bert, slow_extract_child, split_arrays

from layerfuse.cache.codec import SCALES
from layerfuse.cache.manage import bytes_on_disk
from layerfuse.cache.reader import open_entry
from layerfuse.extract.estimate import estimate
from layerfuse.extract.run import ExtractConfig, extract
from layerfuse.training import TrainConfig, train_head
from layerfuse.training.data import load_data


def _extract(tiny_bert_dir, tiny_conll_dir, root, **kw):
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(root), unit_rows=256,
                           **kw)
    return extract(config, progress=False, log=lambda m: None)


@pytest.fixture(scope="module")
def int8_entry(tmp_path_factory, tiny_bert_dir, tiny_conll_dir) -> str:
    return _extract(tiny_bert_dir, tiny_conll_dir, tmp_path_factory.mktemp("int8"), dtype="int8").path


def test_int8_is_the_float32_extraction_quantised(int8_entry, tiny_bert_dir, tiny_conll_dir, tmp_path):
    fp32 = _extract(tiny_bert_dir, tiny_conll_dir, tmp_path, dtype="float32", splits=("train",)).path
    assert fp32 != int8_entry  # dtype is a key field: another entry
    x = zarr.open_group(fp32, mode="r")["train"]["hidden"][:]
    group = zarr.open_group(int8_entry, mode="r")["train"]
    # The rule, written out independently of `layerfuse.cache.codec`.
    s = np.abs(x).max(axis=-1) / np.float32(127)
    s[s == 0] = 1
    q = np.clip(np.round(x / s[..., None]), -127, 127).astype(np.int8)
    np.testing.assert_array_equal(group[SCALES][:], s)
    np.testing.assert_array_equal(group["hidden"][:], q)
    assert group["hidden"].dtype == np.int8 and group[SCALES].dtype == np.float32
    got = open_entry(int8_entry).split("train").hidden(dtype=np.float32)
    # |x - x^| <= max|x| / 254, up to float32 rounding of x / s (2^-24 relative, of up to 127 steps)
    assert (np.abs(got - x) <= s[..., None] / 2 * (1 + 1e-4)).all()


def test_a_head_trains_on_an_int8_cache(int8_entry):
    data = load_data(open_entry(int8_entry))
    assert data.train.hidden.dtype == np.int8 and data.train.scales.dtype == np.float32  # held as stored
    result = train_head(TrainConfig(fusion="concat", shots=8, epochs=2, seed=0), data, keep_tagger=False)
    assert math.isfinite(result.best_dev_f1)


def test_dry_run_counts_int8_bytes(tiny_bert_dir, tiny_conll_dir, tmp_path):
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path),
                           unit_rows=256, dtype="int8")
    est = estimate(config)
    assert not os.path.exists(est.path)  # the estimate wrote nothing
    result = extract(config, progress=False, log=lambda m: None)
    assert result.path == est.path
    assert 0.95 <= est.total / bytes_on_disk(result.path) <= 1.05, (est.total, bytes_on_disk(result.path))
    for s, done in zip(est.splits, result.splits):
        assert 0.95 <= s.bytes / done.bytes_on_disk <= 1.05, (s.split, s.bytes, done.bytes_on_disk)


# As tests/extract/test_resume.py: a child whose writer pauses after each unit, killed between units.
CHILD = slow_extract_child(', dtype="int8"')


@pytest.mark.slow
def test_killed_int8_extraction_resumes_bit_for_bit(int8_entry, tiny_bert_dir, tiny_conll_dir, tmp_path):
    root = str(tmp_path / "killed")
    path = os.path.join(root, os.path.basename(int8_entry))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_bert_dir), str(tiny_conll_dir), root, "2.0"],
                             env=env)
    kill_mid_extraction(child, path, after_units=2)
    resumed = _extract(tiny_bert_dir, tiny_conll_dir, root, dtype="int8", splits=("train",))
    assert resumed.path == path
    got, want = split_arrays(path), split_arrays(int8_entry)
    assert got.keys() == want.keys() and SCALES in got
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_int8_holds_large_values_and_refuses_non_finite_ones(tiny_bert_dir, tiny_conll_dir, tmp_path):
    from click.testing import CliRunner

    from layerfuse.cli.extract import main

    def run(model, root, *extra):
        return CliRunner().invoke(main, ["--model", str(model), "--dataset", str(tiny_conll_dir), "--cache-dir",
                                         str(root), "--unit-rows", "256", "--splits", "train", "--quiet",
                                         "--dtype", "int8", *extra])

    loud = scaled_bert(tiny_bert_dir, tmp_path / "loud", lambda layer: layer.output.LayerNorm.weight.fill_(1e5))
    out = run(loud, tmp_path / "a")
    assert out.exit_code == 0, out.output  # per-vector scales: no value is too large
    [entry] = [p for p in (tmp_path / "a").iterdir() if p.is_dir()]
    split = open_entry(str(entry)).split("train")
    hidden = split.hidden(layers=[2])
    assert hidden.dtype == np.float32  # past float16's range: read wider, never as inf
    assert np.isfinite(hidden).all() and np.abs(hidden).max() > 65504
    assert split.attrs["int8_max_abs"] == pytest.approx(float(np.abs(hidden).max()))

    nan = scaled_bert(tiny_bert_dir, tmp_path / "nan", lambda layer: layer.intermediate.dense.weight.mul_(1e6))
    out = run(nan, tmp_path / "b", "--precision", "fp16")
    assert out.exit_code == 1 and "Traceback" not in out.output
    [error] = [line for line in out.output.splitlines() if line.startswith("error:")]
    assert "split 'train', layer 2 (0 = embeddings): largest magnitude nan: " in error
    assert "the forward pass under --precision fp16 is non-finite already" in error


def test_units_quantised_where_they_were_encoded_store_the_same_bytes(int8_entry, tiny_bert_dir, tiny_conll_dir,
                                                                      tmp_path, monkeypatch):
    """On a GPU each int8 unit is quantised on the device and the writer takes (q, scales); here the
    same path runs on the CPU, and every stored array equals the writer-quantised entry's."""
    from layerfuse.extract.job import BackgroundWriter

    monkeypatch.setattr(BackgroundWriter, "quantizes_on", lambda self, device: self.writer.plan.dtype == "int8")
    entry = _extract(tiny_bert_dir, tiny_conll_dir, tmp_path, dtype="int8")
    got, want = {s: split_arrays(entry.path, s) for s in ("train", "dev")}, {
        s: split_arrays(int8_entry, s) for s in ("train", "dev")}
    for split in want:
        assert got[split].keys() == want[split].keys() and SCALES in got[split]
        for name in want[split]:
            np.testing.assert_array_equal(got[split][name], want[split][name], err_msg=f"{split}/{name}")


def test_an_outlier_dimension_that_zeroes_the_rest_is_said(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """A model with outlier dimensions (a LayerNorm bias of 400 on one of them, as the roberta family has):
    int8 stored nearly every other value as 0, and a head's F1 halved, without a word (only the last layer
    is given the outlier here)."""
    def outlier(layer):
        layer.output.LayerNorm.bias[0] = 400.0

    said = []
    model = scaled_bert(tiny_bert_dir, tmp_path / "outlier", outlier)
    config = ExtractConfig(model=str(model), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path / "root"),
                           unit_rows=256, dtype="int8", splits=("train",))
    extract(config, progress=False, log=said.append)
    [line] = [m for m in said if "int8 stores many" in m]
    assert line.startswith("train: int8 stores many of some layers' values as 0 (layer 2 ")  # the last, changed
    quiet = []
    extract(ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path / "p2"),
                          unit_rows=256, dtype="int8", splits=("train",)), progress=False, log=quiet.append)
    assert not any("int8 stores" in m for m in quiet)  # the plain tiny model: no warning
