"""Progress on a terminal: `train-head` draws one bar for its run (steps, the training loss, the last dev
F1), `sweep` one for its grid (runs done), `extract` one per split; none draws anything when stderr is
not a terminal (a log, a pipe: CliRunner's stderr is not one) or with --quiet.
The terminal check is forced where a bar is wanted."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from layerfuse.cli import progress
from layerfuse.cli.extract import main as extract
from layerfuse.cli.sweep import main as sweep
from layerfuse.cli.train import main as train_head

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def terminal(monkeypatch):
    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: True)


def _train(tiny_cache, tmp_path, *extra):
    args = ["--cache", tiny_cache, "--fusion", "base", "--shots", "2", "--epochs", "2", "--seed", "0",
            "--out", str(tmp_path / "runs"), *extra]
    result = CliRunner().invoke(train_head, args)
    assert result.exit_code == 0, result.output
    return result.stderr


def test_train_head_draws_its_bar_on_a_terminal(tiny_cache, tmp_path, terminal):
    err = _train(tiny_cache, tmp_path)
    bar = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("base-n2-e2-s0")]
    assert bar, err
    assert "step" in bar[-1] and "loss " in bar[-1] and "dev F1 " in bar[-1]


def test_train_head_draws_nothing_with_quiet_or_off_a_terminal(tiny_cache, tmp_path, monkeypatch):
    assert "base-n2-e2-s0" not in _train(tiny_cache, tmp_path)  # CliRunner's stderr is no terminal
    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: True)
    assert "base-n2-e2-s0" not in _train(tiny_cache, tmp_path, "--quiet")


def test_sweep_draws_its_grid_bar_only_on_a_terminal(tiny_cache, tmp_path, monkeypatch):
    args = ["--cache", tiny_cache, "--out", str(tmp_path / "sweep"), "--fusions", "base", "--shots", "all",
            "--epochs", "1", "--trials", "1", "--eval-points", "1", "--workers", "1", "--keep-heads", "none"]
    first = CliRunner().invoke(sweep, args)
    assert first.exit_code == 0, first.output
    assert "runs:" not in first.stderr
    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: True)
    again = CliRunner().invoke(sweep, args)  # the run is in the results already: the bar shows it done
    assert again.exit_code == 0, again.output
    assert "runs: 100%" in again.stderr and "1/1" in again.stderr
    quiet = CliRunner().invoke(sweep, [*args, "--quiet"])
    assert quiet.exit_code == 0 and "runs:" not in quiet.stderr


def test_extract_draws_its_bars_only_on_a_terminal(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch):
    """extract drew tqdm frames (carriage returns and all) into logs and pipes."""
    def run(root):
        args = ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir), "--cache-dir", str(tmp_path / root)]
        result = CliRunner().invoke(extract, args)
        assert result.exit_code == 0, result.output
        return result.stderr

    assert "extract train" not in run("piped") and "\r" not in run("piped2")
    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: True)
    assert "extract train" in run("terminal")
