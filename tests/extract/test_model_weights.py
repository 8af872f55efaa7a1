"""A checkpoint whose weights lack part of the encoder loaded with those tensors random, in silence (a
load report scrolled past among the lines every MLM checkpoint prints); only the pooler, which no token
head reads, may be missing."""

from __future__ import annotations

import shutil

import pytest

from layerfuse.errors import LayerfuseError
from layerfuse.extract.models import load_model, model_info


def _copy(src, dst, keep):
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    weights = load_file(dst / "model.safetensors")
    save_file({k: v for k, v in weights.items() if keep(k)}, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def test_missing_encoder_weights_are_refused(tiny_bert_dir, tmp_path):
    folder = _copy(tiny_bert_dir, tmp_path / "cut", keep=lambda k: "layer.1." not in k)
    with pytest.raises(LayerfuseError, match=r"lack \d+ of the encoder's tensors \(encoder.layer.1.*would be random"):
        load_model(model_info(str(folder)), device="cpu")


def test_a_missing_pooler_loads_quietly(tiny_bert_dir, tmp_path, capfd, caplog):
    folder = _copy(tiny_bert_dir, tmp_path / "no-pooler", keep=lambda k: not k.startswith("pooler."))
    load_model(model_info(str(folder)), device="cpu")
    assert "LOAD REPORT" not in capfd.readouterr().err + caplog.text
