"""Exit codes as click and GNU tools have them: 2 for a wrong call (a bad option value or options that do not
go together, checked by a command itself as click checks its own), 1 for a failure (a missing file, a damaged
cache): a script tells "fix the command line" from "the run failed"."""

from __future__ import annotations

import pytest
from cli_output import one_error_line, one_usage_error
from click.testing import CliRunner

from layerfuse.cli.main import main


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("command, said", [
    (["train-head", "--fusion", "base", "--shots", "0"], "--shots '0' must be >= 1"),
    (["train-head", "--fusion", "base", "--layers", "1,9"], "layer 9 in '1,9' is out of range"),
    (["train-head", "--fusion", "base", "--fusion-opt", "nope=1"], "no fusion has an option 'nope'"),
    (["sweep", "--fusions", "base,nope"], "--fusions 'base,nope': 'nope' is not"),
    (["sweep", "--lrs", "1e-3,fast"], "--lrs '1e-3,fast': 'fast' is not a number or 'default'"),
    (["rank-layers", "--layers", "auto:x"], "bad layer spec 'auto:x'"),
    (["rank-layers", "--labels", "nope"], "--labels 'nope'"),
])
def test_a_bad_option_value_exits_2(tiny_cache, tmp_path, command, said):
    line = one_usage_error(_run(*command, "--cache", tiny_cache, "--out", tmp_path / "out", "--quiet"))
    assert said in line


def test_options_that_do_not_go_together_exit_2(tiny_cache, tiny_bert_dir, tmp_path):
    assert "--cache names the entry itself" in one_usage_error(
        _run("train-head", "--cache", tiny_cache, "--model", tiny_bert_dir, "--out", tmp_path / "out"))
    assert "--token-file goes with --server" in one_usage_error(
        _run("extract", "--model", tiny_bert_dir, "--dataset", tmp_path, "--token-file", tmp_path / "t"))
    assert "--token-budget 1 is too small" in one_usage_error(
        _run("extract", "--model", tiny_bert_dir, "--dataset", tmp_path, "--token-budget", 1))
    assert "nothing to tag: pass --text" in one_usage_error(_run("predict", "--head", tmp_path / "head.pt"))
    assert "--out goes with --conll" in one_usage_error(
        _run("predict", "--head", tmp_path / "head.pt", "--text", "Alice", "--out", tmp_path / "o.conll"))


def test_a_missing_file_still_exits_1(tiny_bert_dir, tmp_path):
    """A failure of the files, not of the call: the one ``error:`` line and exit 1, as before."""
    for command in ("train-head", "sweep", "rank-layers"):
        assert str(tmp_path / "nope") in one_error_line(_run(command, "--cache", tmp_path / "nope", "--quiet",
                                                              "--out", tmp_path / "out"))
    assert "does not exist" in one_error_line(_run("extract", "--model", tiny_bert_dir, "--dataset", tmp_path / "nope",
                                                   "--cache-dir", tmp_path / "root", "--quiet"))
    assert "head.pt" in one_error_line(_run("predict", "--head", tmp_path / "head.pt", "--text", "Alice"))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "holds no line" in one_error_line(_run("predict", "--head", tmp_path / "head.pt", "--file", empty))



def test_a_value_read_from_a_file_is_a_failure_not_a_usage_error(tmp_path):
    """A results file holding a run of a fusion this process does not know (a user's, registered in their
    script) made `sweep --report` print click's usage as if the command line were wrong, naming no file."""
    import json

    out = tmp_path / "sweep"
    out.mkdir()
    record = {"config": {"fusion": "mine", "shots": 4, "epochs": 3, "seed": 0, "lr": None}, "best_dev_f1": 0.5,
              "test_f1_at_best": 0.5, "model": "m", "dataset": "d", "evals": [], "seconds": {"total": 1.0}}
    (out / "results.jsonl").write_text(json.dumps(record) + "\n")
    line = one_error_line(_run("sweep", "--report", "--out", out))
    assert "results.jsonl:1: unknown fusion 'mine'" in line
