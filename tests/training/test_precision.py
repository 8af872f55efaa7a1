"""`--precision auto`: decided by a measured product, remembered per machine, overridable."""

from __future__ import annotations

import json

import pytest
import torch

from layerfuse import precision
from layerfuse.training.runtime import resolve_precision


def test_explicit_precisions_pass_through(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "time_products", lambda device: pytest.fail("probed for an explicit choice"))
    assert resolve_precision("fp32", root=str(tmp_path)) == "fp32"
    assert resolve_precision("bf16", root=str(tmp_path)) == "bf16"


@pytest.mark.parametrize("fp32_s, bf16_s, expected", [(1.0, 0.5, "bf16"), (1.0, 0.7, "bf16"), (1.0, 0.8, "fp32"),
                                                      (1.0, 3.0, "fp32")])
def test_bf16_only_where_clearly_faster(tmp_path, monkeypatch, fp32_s, bf16_s, expected):
    monkeypatch.setattr(precision, "time_products", lambda device: (fp32_s, bf16_s))
    assert resolve_precision("auto", "cpu", root=str(tmp_path)) == expected


def test_the_decision_is_recorded_and_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "time_products", lambda device: (2e-3, 1e-3))
    assert resolve_precision("auto", "cpu", root=str(tmp_path)) == "bf16"
    record = json.loads((tmp_path / "precision.json").read_text())
    (entry,) = record.values()
    assert entry == {"precision": "bf16", "fp32_ms": 2.0, "bf16_ms": 1.0}
    monkeypatch.setattr(precision, "time_products", lambda device: pytest.fail("measured twice"))
    assert resolve_precision("auto", "cpu", root=str(tmp_path)) == "bf16"
    # Editing the record overrides the decision (and deleting it measures again).
    (tmp_path / "precision.json").write_text(json.dumps({k: {**v, "precision": "fp32"} for k, v in record.items()}))
    assert resolve_precision("auto", "cpu", root=str(tmp_path)) == "fp32"


def test_a_decision_that_cannot_be_remembered_is_used_all_the_same(tmp_path, monkeypatch, capsys):
    """On a read-only root, `train-head --cache ENTRY` without --precision died in "Permission denied
    (.../precision.json.PID.tmp)" after measuring: the measured choice was lost for want of a place to keep it."""
    monkeypatch.setattr(precision, "time_products", lambda device: (2e-3, 1e-3))
    real = open

    def read_only(path, mode="r", *args, **kw):
        if "w" in mode and str(path).startswith(str(tmp_path)):
            raise PermissionError(13, "Permission denied", path)
        return real(path, mode, *args, **kw)

    monkeypatch.setattr("builtins.open", read_only)
    assert resolve_precision("auto", "cpu", root=str(tmp_path)) == "bf16"
    said = capsys.readouterr().err
    assert f"measured bf16 here, not remembered ({tmp_path / 'precision.json'}: Permission denied)" in said
    assert "--precision bf16 skips the measurement" in said and not (tmp_path / "precision.json").exists()


def test_a_full_disk_leaves_no_temporary_file_in_the_root(tmp_path, monkeypatch, capsys):
    """The measured choice cut short by a full disk left `precision.json.PID.tmp` in the root for good."""
    import errno

    monkeypatch.setattr(precision, "time_products", lambda device: (2e-3, 1e-3))
    real = open

    class Full:  # opens, then fails on write as a full disk does
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    def full(path, mode="r", *args, **kw):
        f = real(path, mode, *args, **kw)
        return Full(f) if "w" in mode and str(path).startswith(str(tmp_path)) else f

    monkeypatch.setattr("builtins.open", full)
    assert resolve_precision("auto", "cpu", root=str(tmp_path)) == "bf16"
    assert "not remembered" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_the_probe_times_both_dtypes():
    fp32_s, bf16_s = precision.time_products(torch.device("cpu"), repeats=1)
    assert fp32_s > 0 and bf16_s > 0


@pytest.mark.parametrize("text", ["[]", "null", "3", '{"KEY": {}}', '{"KEY": {"precision": "fast"}}', '{"KEY": 1}'])
def test_a_remembered_decision_of_another_shape_is_measured_again(tmp_path, monkeypatch, text):
    """A precision.json that is JSON but not the decisions this module writes (edited, or another tool's
    file) was a 38-line TypeError or KeyError at every `--precision auto` run."""
    key = precision.machine_key(torch.device("cpu"))
    (tmp_path / "precision.json").write_text(text.replace("KEY", key))
    monkeypatch.setattr(precision, "time_products", lambda device: (2e-3, 1e-3))
    assert resolve_precision("auto", "cpu", root=str(tmp_path)) == "bf16"
    assert json.loads((tmp_path / "precision.json").read_text())[key]["precision"] == "bf16"
