"""Hidden states that the storage dtype cannot hold stop `extract` with one line naming the split,
layer and magnitude; nothing is marked complete, and a wider dtype is another entry that succeeds."""

from __future__ import annotations

import re

import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from conftest import scaled_bert

from layerfuse.cache.manage import entry_status, verify
from layerfuse.cache.reader import open_entry
from layerfuse.cli.extract import main
from layerfuse.errors import IncompleteEntryError


@pytest.fixture(scope="module")
def loud_bert(tiny_bert_dir, tmp_path_factory):
    """Last LayerNorm weight 1e5: layer 2 (of 0..2) reaches a few 1e5, beyond float16's 65504."""
    return scaled_bert(tiny_bert_dir, tmp_path_factory.mktemp("loud") / "bert",
                        lambda layer: layer.output.LayerNorm.weight.fill_(1e5))


def _args(model, data, root, *extra):
    return ["--model", str(model), "--dataset", str(data), "--cache-dir", str(root), "--unit-rows", "256",
            "--splits", "train", "--quiet", *extra]


def _entries(root):
    return sorted(p for p in root.iterdir() if p.is_dir())


@pytest.mark.parametrize("pooling", ["first", "mean"])  # the stored values are seen per batch / as the mean
def test_overflow_fails_in_one_line_and_a_wider_dtype_succeeds(loud_bert, tiny_conll_dir, tmp_path, pooling):
    out = CliRunner().invoke(main, _args(loud_bert, tiny_conll_dir, tmp_path, "--pooling", pooling))
    assert out.exit_code == 1 and "Traceback" not in out.output
    errors = [line for line in out.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out.output
    assert "split 'train', layer 2 (0 = embeddings)" in errors[0]
    assert "--dtype bfloat16 or --dtype float32" in errors[0]
    magnitude = float(re.search(r"largest magnitude ([0-9.e+]+) does not fit float16", errors[0]).group(1))

    [partial] = _entries(tmp_path)
    assert not entry_status(str(partial)).complete
    split = zarr.open_group(str(partial), mode="r")["train"]
    assert not split.attrs["complete"] and not split["done"][:].any()  # the failing unit was not stored
    with pytest.raises(IncompleteEntryError):
        open_entry(str(partial)).split("train")
    again = CliRunner().invoke(main, _args(loud_bert, tiny_conll_dir, tmp_path, "--pooling", pooling))
    assert again.exit_code == 1 and errors[0] in again.output  # a rerun meets the same values, says the same

    out = CliRunner().invoke(main, _args(loud_bert, tiny_conll_dir, tmp_path, "--pooling", pooling,
                                         "--dtype", "float32"))
    assert out.exit_code == 0, out.output
    [wide] = [p for p in _entries(tmp_path) if p != partial]
    assert verify(str(wide)) == []
    hidden = open_entry(str(wide)).split("train").hidden(layers=[2])[:, 0]
    assert np.isfinite(hidden).all() and np.abs(hidden).max() > 65504
    # The message names the largest magnitude of the first unit (rows 0:256), the one that stopped it.
    assert magnitude == pytest.approx(float(np.abs(hidden[:256]).max()), rel=1e-3)
    with pytest.raises(IncompleteEntryError):  # the float16 entry stays what it was: unfinished
        open_entry(str(partial)).split("train")


def test_bfloat16_holds_what_float16_cannot(loud_bert, tiny_conll_dir, tmp_path):
    out = CliRunner().invoke(main, _args(loud_bert, tiny_conll_dir, tmp_path, "--dtype", "bfloat16"))
    assert out.exit_code == 0, out.output
    [entry] = _entries(tmp_path)
    assert open_entry(str(entry)).split("train").n_rows == 1116 and verify(str(entry)) == []


def test_non_finite_forward_under_fp16_autocast(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """A feed-forward that overflows float16 inside the layer: its LayerNorm would bring the output
    back to a normal range in fp32, but under fp16 autocast the sum is already inf - inf = nan."""
    model = scaled_bert(tiny_bert_dir, tmp_path / "bert", lambda layer: layer.intermediate.dense.weight.mul_(1e6))
    root = tmp_path / "cache"
    out = CliRunner().invoke(main, _args(model, tiny_conll_dir, root, "--precision", "fp16", "--dtype", "float32"))
    assert out.exit_code == 1 and "Traceback" not in out.output
    [error] = [line for line in out.output.splitlines() if line.startswith("error:")]
    assert "split 'train', layer 2 (0 = embeddings): largest magnitude nan: " in error
    assert "the forward pass under --precision fp16 is non-finite already" in error
    assert "--precision fp32" in error
    assert not entry_status(str(_entries(root)[0])).complete
    out = CliRunner().invoke(main, _args(model, tiny_conll_dir, root))  # fp32 forward, float16 storage
    assert out.exit_code == 0, out.output
