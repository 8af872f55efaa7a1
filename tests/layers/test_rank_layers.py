"""rank-layers: the layer-at-a-time score equals the score of the fully loaded array, and the CLI
writes its record and plot, scores exactly the few-shot sample, and fails in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_output import one_error_line, one_usage_error
from click.testing import CliRunner

from layerfuse.cache.reader import open_entry
from layerfuse.cli.rank import main
from layerfuse.layers.scores import score_layers
from layerfuse.layers.variability import rank_layers
from layerfuse.training.sampling import entity_types


def test_score_layers_equals_rank_layers_on_loaded_array(tiny_cache):
    split = open_entry(tiny_cache).split("train")
    hidden = split.hidden()  # [rows, L + 1, d], everything at once
    assert hidden.shape[1] == 3
    expected = rank_layers(hidden, split.labels, layer_ids=[0, 1, 2], max_per_class=40, seed=3)
    got = score_layers(split, max_per_class=40, seed=3)
    assert [layer for layer, _ in got] == [0, 1, 2]
    np.testing.assert_allclose([v for _, v in got], [v for _, v in expected], rtol=1e-12)

    sentences = np.array([9, 2, 30, 4, 17, 11, 60])
    sub = split.hidden(sentences=np.sort(sentences))  # a sample is scored in sentence order
    expected = rank_layers(sub, split.labels[split.rows_of(np.sort(sentences))], layer_ids=[2, 0], max_per_class=2000)
    assert score_layers(split, sentences=sentences, layers=[2, 0]) == expected


def test_a_samples_scores_do_not_depend_on_its_draw_order(tiny_cache):
    """The per-tag cap keeps seeded token positions, so rows in draw order kept other tokens than
    train-head's ``--layers auto:K``, which scores its sample sorted: rank-layers --shots gave other nu,
    and at N = 128 on CoNLL-2003 another pick."""
    split = open_entry(tiny_cache).split("train")
    drawn = np.array([9, 2, 30, 4, 17, 11, 60, 25, 41, 7])
    ordered = np.sort(drawn)
    expected = rank_layers(split.hidden(sentences=ordered), split.labels[split.rows_of(ordered)],
                           layer_ids=[0, 1, 2], max_per_class=5, seed=4)
    assert score_layers(split, sentences=drawn, max_per_class=5, seed=4) == expected
    assert score_layers(split, sentences=ordered, max_per_class=5, seed=4) == expected


def _run(args):
    result = CliRunner().invoke(main, args)
    return result, result.output


def test_cli_writes_json_and_png_and_prints_every_layer(tiny_cache, tmp_path):
    result, out = _run(["--cache", tiny_cache, "--out", str(tmp_path), "--max-per-class", "50", "--top", "2"])
    assert result.exit_code == 0, out
    key = open_entry(tiny_cache).meta["key"]
    record = json.loads((tmp_path / f"rank-layers-{key}-train-top2-cap50.json").read_text())  # named by both
    png = tmp_path / f"rank-layers-{key}-train-top2-cap50.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 100_000
    table = {int(line.split()[0]): line for line in out.splitlines() if line.strip()[:1].isdigit()}
    assert sorted(table) == [0, 1, 2]
    assert [s["layer"] for s in record["scores"]] == [0, 1, 2]
    assert sum("*" in line for line in table.values()) == 2 == len(record["best"])
    expected = score_layers(open_entry(tiny_cache).split("train"), max_per_class=50)
    assert [s["nu"] for s in record["scores"]] == pytest.approx([v for _, v in expected])
    assert record["cache"]["key"] == key and record["params"]["max_per_class"] == 50
    assert record["seconds"] >= 0 and record["sentences"] is None


def test_the_marked_best_are_what_auto_k_fuses(tiny_cache, tmp_path):
    """Layer 0 is scored and ranked but never marked: `--layers auto:K` picks from 1..L, and the
    README's "rank the layers, then a head on the 3 best" must mean the same layers."""
    result, out = _run(["--cache", tiny_cache, "--out", str(tmp_path / "top"), "--top", "1", "--shots", "4"])
    assert result.exit_code == 0, out
    result, auto_out = _run(["--cache", tiny_cache, "--out", str(tmp_path / "auto"), "--layers", "auto:1",
                             "--shots", "4"])
    assert result.exit_code == 0, auto_out
    (marked,), (auto,) = (json.loads(next((tmp_path / d).glob("*.json")).read_text())["best"] for d in ("top", "auto"))
    assert marked == auto != 0
    assert "auto:K never fuses layer 0" in out


def test_cli_seed_without_shots_names_its_files(tiny_cache, tmp_path):
    # without --shots the seed still draws the tokens kept per tag (--max-per-class): another seed, other nu
    key = open_entry(tiny_cache).meta["key"]
    for seed in ("0", "3"):
        result, out = _run(["--cache", tiny_cache, "--out", str(tmp_path), "--max-per-class", "5", "--seed", seed])
        assert result.exit_code == 0, out
    first = json.loads((tmp_path / f"rank-layers-{key}-train-cap5.json").read_text())
    second = json.loads((tmp_path / f"rank-layers-{key}-train-cap5-s3.json").read_text())  # beside, not over
    assert (first["params"]["seed"], second["params"]["seed"]) == (0, 3) and "(train, seed 3)" in out
    assert first["scores"] != second["scores"]


def test_cli_shots_scores_the_few_shot_sample(tiny_cache, tmp_path):
    from layerfuse.training.sampling import few_shot_sample

    entry = open_entry(tiny_cache)
    split = entry.split("train")
    result, out = _run(["--cache", tiny_cache, "--out", str(tmp_path), "--shots", "4", "--seed", "7",
                        "--layers", "1..2"])
    assert result.exit_code == 0, out
    record = json.loads((tmp_path / f"rank-layers-{entry.meta['key']}-train-n4-s7-l1_2.json").read_text())
    sample = few_shot_sample(split.n_sentences, shots=4, n_types=len(entity_types(entry.meta)), seed=7)
    assert len(sample) == 4 * 3  # PER, LOC, ORG
    assert record["sentences"] == [int(s) for s in sample]
    expected = score_layers(split, sentences=sample, layers=[1, 2], seed=7)
    assert [s["layer"] for s in record["scores"]] == [1, 2]
    assert [s["nu"] for s in record["scores"]] == pytest.approx([v for _, v in expected])
    assert record["n_tokens"] == len(split.rows_of(sample))


def test_cli_shots_all_is_the_whole_split_as_elsewhere(tiny_cache, tmp_path):
    """Every other --shots takes `all`; rank-layers refused it (`'all' is not a valid integer range`)."""
    whole, out = _run(["--cache", tiny_cache, "--out", str(tmp_path / "a"), "--layers", "1..2"])
    assert whole.exit_code == 0, out
    said, out = _run(["--cache", tiny_cache, "--out", str(tmp_path / "b"), "--layers", "1..2", "--shots", "all"])
    assert said.exit_code == 0, out
    (a,), (b,) = (sorted((tmp_path / d).glob("*.json")) for d in ("a", "b"))
    assert a.name == b.name
    assert json.loads(a.read_text())["scores"] == json.loads(b.read_text())["scores"]


@pytest.mark.parametrize("args, needle", [
    (["--split", "nope"], "'nope'"),
    (["--layers", "0..5"], "layer 3"),
    (["--layers", "9"], "layer 9"),
    (["--shots", "1000"], "shots=1000"),
    # the split scored, not train, and no --shots all (which rank-layers does not take)
    (["--shots", "1000", "--split", "dev"], "the dev split has only"),
])
def test_cli_errors_are_one_line(tiny_cache, tmp_path, args, needle):
    result, out = _run(["--cache", tiny_cache, "--out", str(tmp_path), *args])
    line = one_error_line(result) if "--split" in args and "nope" in args else one_usage_error(result)
    assert needle in line, out
    assert "--shots all" not in line  # which rank-layers does not take
    assert not list(Path(tmp_path).iterdir())


def test_a_rerun_with_other_settings_writes_beside_the_first(tiny_cache, tmp_path):
    """rank-layers with another --layers or --top wrote over the first run's JSON and plot."""
    from layerfuse.cli.rank import main as rank_main

    runner = CliRunner()
    for args in ([], ["--layers", "1,2"], ["--top", "1"], ["--layers", "0,2"], ["--layers", "0-2"]):
        result = runner.invoke(rank_main, ["--cache", tiny_cache, "--out", str(tmp_path), *args])
        assert result.exit_code == 0, result.output
    key = open_entry(tiny_cache).meta["key"]
    # 0,2 and 0-2 are other layers: both were named -l0.2, and the second run's files replaced the first's
    assert {p.name for p in tmp_path.glob("*.json")} == {f"rank-layers-{key}-train{s}.json"
                                                         for s in ("", "-l1.2", "-top1", "-l0.2", "-l0_2")}
