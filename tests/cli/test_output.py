"""What the commands print: F1 in points with one decimal (as the reports and the paper), records
in fractions; `sweep --quiet` draws no bar; a bad item of a comma-separated option is one line."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from cli_output import one_usage_error
from click.testing import CliRunner

from layerfuse.cli.main import main
from layerfuse.cli.train import _scores
from layerfuse.display import f1_points
from layerfuse.experiments.runner import _headline
from layerfuse.training.tasks import NER


def test_f1_reads_in_points():
    assert f1_points(0.19934) == "19.9" and f1_points(1.0) == "100.0" and f1_points(None) == "-"
    result = SimpleNamespace(best_dev_ppl=None, best_dev_f1=0.19934, test_f1_at_best=0.18251, best_step=7)
    assert _scores(result) == "best dev F1 19.9 (step 7), test F1 18.3"
    assert _scores(SimpleNamespace(**{**vars(result), "test_f1_at_best": None})).endswith("test F1 -")
    assert NER().describe({"f1": 0.5, "loss": 0.25}) == "dev F1 50.0 loss 0.2500"  # train-head --verbose
    assert _headline({"best_dev_f1": 0.6123}) == "F1=61.2"  # the sweep's bar
    pos = SimpleNamespace(best_dev_accuracy=0.9123, test_accuracy_at_best=0.9, best_step=3)  # a POS head
    assert _scores(pos) == "best dev accuracy 91.2 (step 3), test accuracy 90.0"
    assert _headline({"best_dev_f1": None, "best_dev_accuracy": 0.9123}) == "acc=91.2"
    assert NER().describe({"accuracy": 0.5, "loss": 0.25}) == "dev accuracy 50.0 loss 0.2500"


def test_train_head_prints_points_and_records_fractions(tiny_cache, tmp_path):
    out = tmp_path / "runs"
    result = CliRunner().invoke(main, ["train-head", "--cache", tiny_cache, "--fusion", "base", "--shots", "4",
                                       "--epochs", "1", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "base-n4-e1-s0.json").read_text())
    dev = re.search(r"best dev F1 (\d+\.\d) \(step \d+\), test F1 (\d+\.\d)", result.stdout)
    assert dev, result.stdout
    assert 0 <= record["best_dev_f1"] <= 1 and dev.group(1) == f"{100 * record['best_dev_f1']:.1f}"


GRID = ["--fusions", "base", "--shots", "2", "--epochs", "1", "--trials", "1", "--eval-points", "1",
        "--workers", "1", "--precision", "fp32"]


@pytest.mark.parametrize("quiet", [False, True])
def test_sweep_quiet_draws_no_bar(tiny_cache, tmp_path, quiet, monkeypatch):
    from layerfuse.cli import progress

    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: True)  # a bar is drawn on a terminal only
    args = ["sweep", "--cache", tiny_cache, "--out", str(tmp_path / "sweep"), *GRID] + (["--quiet"] if quiet else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    bar = re.search(r"runs: .*\d+/\d+", result.stderr)
    assert (bar is None) == quiet, result.stderr
    assert "F1 (x100)" in result.stdout  # the table still prints


@pytest.mark.parametrize("option, value, message", [
    ("--shots", "8,abc", "--shots 'abc' is not a positive integer or 'all'"),
    ("--shots", "8,0", "--shots '0' must be >= 1 (or 'all')"),
    ("--epochs", "10,x", "--epochs '10,x': 'x' is not an integer"),
    ("--lrs", "abc", "--lrs 'abc': 'abc' is not a number or 'default'"),
    ("--fusions", "dwatt,foo", "--fusions 'dwatt,foo': 'foo' is not one of base, concat, dwatt, extra, scalarmix"),
    ("--layer-scores", "paper,x", "--layer-scores 'paper,x': 'x' is not one of paper, scaled, learned"),
    ("--extra-layers", "1,0", "--extra-layers '1,0': '0' is not an integer >= 1 and <= 48"),
    ("--fusion-opt", "nope=1", "--fusion-opt 'nope=1': no fusion has an option 'nope' (the fusions' options: "
                               "layer_score, extra_layers)"),
    ("--fusion-opt", "layer_score=paper,x", "--fusion-opt layer_score 'paper,x': 'x' is not one of paper, scaled, "
                                            "learned"),
    ("--curve-shots", "8,x", "--curve-shots '8,x': 'x' is not a positive integer or 'all'"),
    ("--shots", ",", "--shots is empty"),
])
def test_a_bad_list_item_is_one_line(tmp_path, option, value, message):
    result = CliRunner().invoke(main, ["sweep", "--cache", str(tmp_path / "none"), "--out", str(tmp_path / "out"),
                                       "--precision", "fp32", option, value])
    assert one_usage_error(result) == f"Error: {message}"  # a wrong call: exit 2, no traceback
