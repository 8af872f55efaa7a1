"""The one layer-spec parser, and `--layers` meaning the same in every command."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from layerfuse.cache.reader import open_entry
from layerfuse.errors import LayerfuseError
from layerfuse.layers import parse_layers


@pytest.mark.parametrize("spec, expected", [
    (None, (1, 2, 3, 4, 5, 6)), ("all", (1, 2, 3, 4, 5, 6)), ("4,2", (2, 4)), ("0,6", (0, 6)),
    ("1..3", (1, 2, 3)), ("2-4,6", (2, 3, 4, 6)), (" 5 ", (5,)),
])
def test_layer_spec(spec, expected):
    parsed = parse_layers(spec, num_layers=6)
    assert parsed.candidates == expected and parsed.k is None


def test_layer_spec_auto():
    parsed = parse_layers("auto:2", num_layers=6)
    assert parsed.candidates == (1, 2, 3, 4, 5, 6) and parsed.k == 2
    assert parsed.fused([(1, 3.0), (2, 1.0), (3, 2.0), (4, 5.0), (5, 0.5), (6, 9.0)]) == (2, 5)


def test_layer_spec_xie_puts_the_classifier_on_the_lowest_nu_layer_and_drops_those_above():
    scores = [(1, 3.0), (2, 1.0), (3, 2.0), (4, 0.9), (5, 0.5), (6, 9.0)]
    assert parse_layers("xie", num_layers=6).fused(scores) == (5,)  # classifier on layer 5, 6 dropped
    assert parse_layers("xie:3", num_layers=6).fused(scores) == (3, 4, 5)  # the 3 layers ending there
    assert parse_layers("auto:3", num_layers=6).fused(scores) == (2, 4, 5)  # not the same rule
    low = [(1, 0.1), (2, 1.0), (3, 2.0)]
    assert parse_layers("xie:2", num_layers=3).fused(low) == (1,)  # fewer, never a layer above the pick
    assert parse_layers("xie:2", num_layers=3).describe(3) == "xie:2 of 1..3"


def test_a_xie_run_fusing_fewer_layers_than_asked_is_said():
    """train-head printed ``layers used (share): 1:1.00`` for ``xie:3`` and nothing more."""
    from layerfuse.layers.spec import xie_shortfall

    assert xie_shortfall("xie:3", [1], num_layers=6) == ("--layers xie:3: the lowest-nu layer is 1, with 0 candidate "
                                                          "layers below it: 1 fused, not 3")
    assert xie_shortfall("xie:3", [1, 2], num_layers=6).endswith("with 1 candidate layer below it: 2 fused, not 3")
    assert xie_shortfall("xie:3", [3, 4, 5], num_layers=6) is None
    assert xie_shortfall("auto:3", [5], num_layers=6) is None and xie_shortfall(None, [6], num_layers=6) is None


def test_xie_keeps_the_classifier_layer_as_the_query():
    from layerfuse.training import TrainConfig

    with pytest.raises(LayerfuseError, match="query_layer"):
        TrainConfig(fusion="dwatt", shots=8, epochs=1, seed=0, layers="xie:2", query_layer="top")
    assert TrainConfig(fusion="dwatt", shots=8, epochs=1, seed=0, layers="xie:2").ranked_by == "xie"


@pytest.mark.parametrize("spec, match", [
    ("7", r"layer 7 .*0\.\.6"), ("-1", r"layer -1 .*0\.\.6"), ("auto:0", r"auto:0 .*1\.\.6"),
    ("auto:7", r"auto:7 .*1\.\.6"), ("auto:x", "auto:K"), ("a,b", "bad layer spec"), ("3,3", "layer 3 is named twice"),
    ("4..2", "start is after end"), ("xie:0", r"xie:0 .*1\.\.6"), ("xie:x", "xie:K"), ("xi", "bad layer spec"),
])
def test_layer_spec_errors(spec, match):
    with pytest.raises(LayerfuseError, match=match):
        parse_layers(spec, num_layers=6)


def test_last_layer_letter():
    assert parse_layers("0..L", num_layers=6).candidates == (0, 1, 2, 3, 4, 5, 6)
    assert parse_layers("l", num_layers=6).candidates == (6,)


@pytest.mark.parametrize("spec, expected", [("all", [1, 2]), ("0,2", [0, 2]), ("2", [2]), ("0..L", [0, 1, 2])])
def test_layers_mean_the_same_in_train_head_and_rank_layers(tiny_cache, tmp_path, spec, expected):
    """train-head fuses, and rank-layers scores, exactly the layers the same --layers names."""
    from layerfuse.cli.rank import main as rank_main
    from layerfuse.cli.train import main as train_main

    runner = CliRunner()
    ranked = runner.invoke(rank_main, ["--cache", tiny_cache, "--out", str(tmp_path), "--layers", spec])
    assert ranked.exit_code == 0, ranked.output
    record = json.loads(next(tmp_path.glob("rank-layers-*.json")).read_text())
    assert [s["layer"] for s in record["scores"]] == expected
    trained = runner.invoke(train_main, ["--cache", tiny_cache, "--out", str(tmp_path), "--layers", spec,
                                         "--fusion", "concat", "--epochs", "0", "--shots", "2"])
    assert trained.exit_code == 0, trained.output
    run = json.loads(next(p for p in tmp_path.glob("concat-*.json") if not p.name.endswith(".head.json")).read_text())
    assert run["layers"] == expected


@pytest.mark.parametrize("spec", ["auto:1", "xie", "xie:2"])
def test_a_ranked_spec_marks_in_rank_layers_what_train_head_fuses(tiny_cache, tmp_path, spec):
    from layerfuse.cli.rank import main as rank_main
    from layerfuse.training.data import load_for_run

    result = CliRunner().invoke(rank_main, ["--cache", tiny_cache, "--out", str(tmp_path), "--layers", spec,
                                            "--shots", "4", "--seed", "3"])
    assert result.exit_code == 0, result.output
    record = json.loads(next(tmp_path.glob("rank-layers-*.json")).read_text())
    assert [s["layer"] for s in record["scores"]] == [1, 2]  # auto:K ranks 1..L
    data = load_for_run(open_entry(tiny_cache), layers=spec, shots=4, seed=3)
    assert record["best"] == list(data.dev.layers)


@pytest.mark.parametrize("command", ["rank", "train"])
def test_bad_spec_is_one_line_in_every_command(tiny_cache, tmp_path, command):
    from layerfuse.cli.main import main

    result = CliRunner().invoke(main, [command, "--cache", tiny_cache, "--out", str(tmp_path), "--layers", "2,2"])
    assert result.exit_code == 2, result.output  # a wrong call, as click's own checks end
    assert result.output.strip().splitlines()[-1] == "Error: layer 2 is named twice in '2,2'"


def test_all_among_other_layers_is_named_as_written():
    """'all,4' was reported as "at 'a66'": every l of the text had become the layer count."""
    from layerfuse.errors import LayerfuseError

    with pytest.raises(LayerfuseError, match=r"bad layer spec 'all,4' at 'all':"):
        parse_layers("all,4", num_layers=6)
    assert parse_layers("0..L", num_layers=6).candidates == tuple(range(7))
