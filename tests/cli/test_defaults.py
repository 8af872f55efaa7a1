"""Defaults declared once: an option that stands for a config field shows and uses the default the
config class declares (the CLI reads it from there)."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest

from layerfuse.cli import extract, sweep, train
from layerfuse.cli.options import default_of
from layerfuse.extract.run import ExtractConfig
from layerfuse.fusions.registry import declared_options
from layerfuse.training.config import TrainConfig

# Where the command means another default on purpose: "auto" measures which precision is faster.
CLI_OWN = {("train-head", "precision")}


def _declared(config_class) -> dict:
    return {f.name: f.default for f in fields(config_class) if f.default is not MISSING}


@pytest.mark.parametrize("name, command, config_class", [
    ("train-head", train.main, TrainConfig),
    ("extract", extract.main, ExtractConfig),
])
def test_options_default_to_the_config_fields(name, command, config_class):
    declared = _declared(config_class)
    checked = [p for p in command.params if p.name in declared and (name, p.name) not in CLI_OWN]
    assert len(checked) >= 8
    for param in checked:
        if getattr(param, "is_flag", False):  # a flag is off unless given
            assert declared[param.name] is False, f"{name} --{param.name}"
        else:
            assert param.default == declared[param.name], f"{name} --{param.name}"


def test_a_fusions_setting_defaults_to_its_declaration():
    by_name = {p.name: p.default for p in train.main.params}
    for name, option in declared_options().items():
        assert by_name[name] == option.default, name


def test_shared_options_of_the_sweep_read_the_same_fields():
    by_name = {p.name: p.default for p in sweep.main.params}
    assert by_name["batch_size"] == default_of(TrainConfig, "batch_size")
    for name, option in declared_options().items():  # a grid dimension each: comma-separated text
        assert by_name[name] == (None if option.default is None else str(option.default)), name
    assert by_name["block_size"] == default_of(ExtractConfig, "block_size")


def test_default_of_names_a_missing_field_or_default():
    assert default_of(TrainConfig, "dropout") == TrainConfig(fusion="base", shots=None, epochs=1, seed=0).dropout
    with pytest.raises(AttributeError, match="no field"):
        default_of(TrainConfig, "nope")
    with pytest.raises(AttributeError, match="no default"):
        default_of(TrainConfig, "fusion")


def test_options_read_function_defaults_too():
    from layerfuse.cli import predict, rank
    from layerfuse.inference.fill_mask import MaskFiller
    from layerfuse.layers.scores import score_layers

    assert default_of(score_layers, "max_per_class") == 2000
    assert {p.name: p.default for p in rank.main.params}["max_per_class"] == default_of(score_layers, "max_per_class")
    assert {p.name: p.default for p in predict.main.params}["top_k"] == default_of(MaskFiller.fill, "top_k")
    with pytest.raises(AttributeError, match="no parameter"):
        default_of(score_layers, "split")
