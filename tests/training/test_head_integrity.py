"""A head proves itself: a run record names the head beside it and the hash of its weights, and a head's
JSON the hash of its weights file; a head that is not the one trained, truncated, or holding non-finite
weights is refused in one line by `export` and `predict`."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from cli_output import one_error_line
from click.testing import CliRunner

from layerfuse.cli.main import main as cli
from layerfuse.training.run_record import resolve_head

pytestmark = pytest.mark.usefixtures("one_thread")
RUN = "concat-n1-e1-s0"  # the run name train-head gives the options below


def _train(cache: str, out, lr: str) -> None:
    result = CliRunner().invoke(cli, ["train-head", "--cache", cache, "--fusion", "concat", "--shots", "1",
                                      "--epochs", "1", "--lr", lr, "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def runs(tiny_cache, tmp_path_factory):
    """runsA trained, copied to runsB, then runsA retrained with another rate (its record moved away
    first, as train-head asks): runsB's record is the old run."""
    base = tmp_path_factory.mktemp("runs")
    _train(tiny_cache, base / "runsA", "1e-3")
    shutil.copytree(base / "runsA", base / "runsB")
    (base / "runsA" / f"{RUN}.json").unlink()
    _train(tiny_cache, base / "runsA", "5e-2")
    return base


def test_a_copied_run_folder_exports_its_own_head(runs, tmp_path):
    record = json.loads((runs / "runsB" / f"{RUN}.json").read_text())
    assert record["checkpoint"] == f"{RUN}.head.safetensors"  # relative: beside the record
    stem, _ = resolve_head(str(runs / "runsB" / f"{RUN}.json"))
    assert stem == str(runs / "runsB" / f"{RUN}.head")
    # The head beside the record replaced by another run's: export refuses it, naming both files.
    shutil.copy(runs / "runsA" / f"{RUN}.head.safetensors", runs / "runsB" / f"{RUN}.head.safetensors")
    out = CliRunner().invoke(cli, ["export", str(runs / "runsB" / f"{RUN}.json"), "--out", str(tmp_path / "m")])
    assert "is not the head" in one_error_line(out)
    assert not (tmp_path / "m").exists()


def _predict(head) -> str:
    return one_error_line(CliRunner().invoke(cli, ["predict", "--head", str(head), "--text", "Alice met Bob"]))


def test_a_truncated_or_changed_head_is_refused_in_one_line(runs, tmp_path):
    shutil.copytree(runs / "runsA", tmp_path / "r")
    weights = tmp_path / "r" / f"{RUN}.head.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    assert "does not match the checksum" in _predict(weights)
    # A head written before checksums (no weights_sha256 in its JSON) still fails in one line, not a traceback.
    meta_path = tmp_path / "r" / f"{RUN}.head.json"
    meta = json.loads(meta_path.read_text())
    del meta["weights_sha256"]
    meta_path.write_text(json.dumps(meta))
    assert "do not fit the head" in _predict(weights)


def test_non_finite_weights_are_refused_at_load(runs, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(runs / "runsA", tmp_path / "r")
    weights = tmp_path / "r" / f"{RUN}.head.safetensors"
    tensors = load_file(str(weights))
    name = next(k for k, t in tensors.items() if t.is_floating_point())
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, str(weights), metadata={"format": "layerfuse-head"})
    meta_path = tmp_path / "r" / f"{RUN}.head.json"  # the checksum made to agree: only the values lie
    meta = json.loads(meta_path.read_text())
    meta["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    meta_path.write_text(json.dumps(meta))
    assert "non-finite weights" in _predict(weights)
    assert torch.isnan(load_file(str(weights))[name]).any()


def test_a_description_sizing_another_head_is_refused_before_it_is_built(runs, tmp_path):
    """An edited description (its checksum made to agree) sized a head of hundreds of GB from a file of MB:
    the head is built on the meta device first and its shapes checked against the file's header."""
    from layerfuse.training.checkpoint import DESCRIPTION_CHECKSUM, description_sha256

    shutil.copytree(runs / "runsA", tmp_path / "r")
    meta_path = tmp_path / "r" / f"{RUN}.head.json"
    meta = json.loads(meta_path.read_text())
    meta["tagger"]["dim"] = 200_000
    meta[DESCRIPTION_CHECKSUM] = description_sha256(meta)
    meta_path.write_text(json.dumps(meta))
    line = _predict(tmp_path / "r" / f"{RUN}.head.safetensors")
    assert "do not fit the head described in" in line and "200000" in line, line
