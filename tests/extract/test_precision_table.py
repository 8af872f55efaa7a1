"""One precision table: extraction, training, fine-tuning and the CLI offer the same names, and
the earlier import names keep their meaning."""

from __future__ import annotations

import contextlib

import torch

from layerfuse.precision import DEFAULT_PRECISION, PRECISIONS, autocast, precision_of


def test_every_user_offers_the_table():
    from layerfuse.cli.extract import main as extract_command
    from layerfuse.extract.encode import PRECISIONS as autocast_dtypes
    from layerfuse.extract.run import ExtractConfig
    from layerfuse.training.config import PRECISIONS as train_names
    from layerfuse.training.config import TrainConfig

    assert list(PRECISIONS) == ["fp32", "bf16", "fp16"] and DEFAULT_PRECISION == "fp32"
    assert train_names == ("fp32", "bf16", "fp16")
    assert autocast_dtypes == {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
    [option] = [p for p in extract_command.params if p.name == "precision"]
    assert list(option.type.choices) == list(PRECISIONS)
    assert ExtractConfig().precision == TrainConfig.precision == DEFAULT_PRECISION


def test_autocast_contexts():
    assert isinstance(autocast("fp32", torch.device("cpu")), contextlib.nullcontext)
    with autocast("bf16", torch.device("cpu")):
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert precision_of("fp16").scales_loss and not precision_of("bf16").scales_loss
