"""A sweep that cannot run says why in one `error:` line, as `train-head` does: a sample larger than the
train split is refused before any worker starts, and an error raised while a worker loads its data
reaches the caller as that error, not as a broken process pool."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from layerfuse.cache.reader import open_entry
from layerfuse.cli.sweep import main
from layerfuse.errors import LayerfuseError
from layerfuse.experiments.runner import run_grid
from layerfuse.training import TrainConfig


def test_too_many_shots_is_one_line_before_any_worker(tiny_cache, tmp_path):
    # The tiny train split holds 122 sentences of 3 entity types: N = 128 asks for 384.
    out = CliRunner().invoke(main, ["--cache", tiny_cache, "--fusions", "concat", "--shots", "8,128", "--epochs", "1",
                                    "--trials", "1", "--workers", "2", "--out", str(tmp_path / "sw")])
    assert out.exit_code == 2  # a wrong call: too many shots for the entry
    errors = [line for line in out.output.splitlines() if line.startswith("Error:")]
    assert errors == ["Error: shots=128 x C=3 (entity types, or a token set's tags) = 384 sentences, but the train "
                      "split has only 122; use fewer shots or --shots all"]
    assert "Traceback" not in out.output and "BrokenProcessPool" not in out.output
    assert not (tmp_path / "sw" / "results.jsonl").exists() or not (tmp_path / "sw" / "results.jsonl").read_text()


@pytest.mark.slow
def test_an_error_while_a_worker_loads_is_raised_as_itself(tiny_cache, tmp_path):
    """Layers outside the entry fail in the worker's loader (the pool's initializer): the caller gets the
    LayerfuseError with its message."""
    config = TrainConfig(fusion="concat", shots=2, epochs=1, seed=0, layers="1,99")
    with pytest.raises(LayerfuseError, match="99"):
        run_grid(open_entry(tiny_cache), [config], results=str(tmp_path / "results.jsonl"), workers=1,
                 progress=False, log=lambda m: None)


@pytest.mark.slow
def test_sweep_command_prints_one_error_line(tiny_cache, tmp_path):
    """The installed command, in its own process: stderr is click's usage and the one line, exit status 2."""
    out = subprocess.run([sys.executable, "-m", "layerfuse", "sweep", "--cache", tiny_cache, "--fusions", "concat",
                          "--shots", "128", "--epochs", "1", "--trials", "1", "--quiet", "--out", str(tmp_path / "sw")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("Usage: ") and "sweep" in lines[0] and "Traceback" not in out.stderr, out.stderr
    assert lines[-1].startswith("Error: shots=128 x C=3 (entity types"), out.stderr


def test_what_a_sweep_does_not_use_is_said_in_one_line(tiny_cache, tmp_path):
    """A setting of a fusion the sweep leaves out, runs that cannot pack under --pack, and grid options
    given to --report were passed by in silence."""
    from click.testing import CliRunner

    from layerfuse.cli.sweep import main

    out = str(tmp_path / "sweep")
    common = ["--cache", tiny_cache, "--shots", "2", "--epochs", "1", "--trials", "1", "--workers", "1",
              "--out", out, "--quiet"]
    first = CliRunner().invoke(main, [*common, "--fusions", "concat", "--fusion-opt", "layer_score=paper",
                                      "--layers", "auto:1", "--pack", "2"])
    assert first.exit_code == 0, first.output
    assert "note: layer_score is a setting of dwatt, which --fusions leaves out: ignored" in first.stderr
    assert "note: 1 of 1 runs cannot pack" in first.stderr
    report = CliRunner().invoke(main, ["--report", "--out", out, "--fusions", "dwatt", "--shots", "4"])
    assert report.exit_code == 0, report.output
    assert "note: --report renders every run of the results file; --fusions, --shots ignored" in report.stderr
    plain = CliRunner().invoke(main, [*common, "--fusions", "concat"])
    assert "note:" not in plain.stderr


def test_a_dev_subset_larger_than_dev_is_refused_before_any_run(tiny_cache, tmp_path):
    """Its runs would have evaluated on all of dev while the report said 'a fixed random subset'."""
    from click.testing import CliRunner

    from layerfuse.cli.sweep import main

    out = tmp_path / "sweep"
    result = CliRunner().invoke(main, ["--cache", tiny_cache, "--fusions", "concat", "--shots", "2", "--epochs", "1",
                                       "--trials", "1", "--dev-sentences", "100000", "--out", str(out), "--quiet"])
    assert result.exit_code == 2 and "--dev-sentences 100000: dev has" in result.output, result.output
    assert not (out / "results.jsonl").exists()


def test_small_api_mistakes_are_one_line(tiny_cache, tmp_path):
    """A negative worker count was concurrent.futures' ValueError, a folder given to read_results an
    IsADirectoryError."""
    from layerfuse.cache.reader import open_entry
    from layerfuse.errors import LayerfuseError
    from layerfuse.experiments.results import read_results
    from layerfuse.experiments.runner import run_grid
    from layerfuse.training import TrainConfig

    config = TrainConfig(fusion="base", shots=2, epochs=1, seed=0)
    with pytest.raises(LayerfuseError, match="workers -1: use 0"):
        run_grid(open_entry(tiny_cache), [config], results=str(tmp_path / "r.jsonl"), workers=-1)
    with pytest.raises(LayerfuseError, match="is a folder; a results file is a JSON-lines file"):
        read_results(str(tmp_path))


def test_grid_takes_a_single_value_as_one_and_refuses_no_trials():
    """grid(fusions="dwatt") read the name letter by letter ("unknown fusion 'd'"); trials=0 gave no runs."""
    from layerfuse.experiments.runner import grid

    base = TrainConfig(fusion="base", shots=None, epochs=1, seed=0)
    configs = grid(fusions="dwatt", shots=8, epochs=[1, 2], trials=2, base=base)
    runs = {(c.fusion, c.shots, c.epochs, c.seed) for c in configs}
    assert runs == {("dwatt", 8, e, s) for e in (1, 2) for s in (0, 1)}
    with pytest.raises(LayerfuseError, match="trials 0: at least 1"):
        grid(fusions=["dwatt"], shots=[8], epochs=[1], trials=0, base=base)


def test_the_report_goes_out_when_the_layer_scores_fail(tiny_cache, tmp_path, monkeypatch):
    """The layer scores read train again after the runs: an entry removed from under a served sweep by then
    lost the finished sweep's report, in an error that blamed its label set."""
    import layerfuse.cli.sweep as sweep

    def gone(*args):
        raise LayerfuseError("the entry was removed")

    monkeypatch.setattr(sweep, "_save_layer_scores", gone)
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "layer_scores.json").write_text("[[1, 0.5]]")  # an earlier sweep's: not these runs'
    out = CliRunner().invoke(main, ["--cache", tiny_cache, "--fusions", "base", "--shots", "2", "--epochs", "1",
                                    "--trials", "1", "--workers", "1", "--quiet", "--out", str(tmp_path / "sw")])
    assert out.exit_code == 0, out.output
    assert "note: the layers' scores were not computed (the entry was removed)" in out.stderr
    assert (tmp_path / "sw" / "report.md").exists() and not (tmp_path / "sw" / "layer_scores.json").exists()


def test_ft_runs_from_the_cache_are_one_line_before_any_worker(tiny_cache, tmp_path):
    """The cache's loader failed inside a worker, in a traceback that did not name the loader to use."""
    config = TrainConfig(fusion="base", shots=2, epochs=1, seed=0, mode="ft")
    with pytest.raises(LayerfuseError, match="load=layerfuse.experiments.load_live"):
        run_grid(open_entry(tiny_cache), [config], results=str(tmp_path / "results.jsonl"), workers=2,
                 progress=False, log=lambda m: None)


def test_ft_runs_keep_no_head_without_their_backbone(tiny_cache, tmp_path):
    """A grid kept an FT run's head alone: exported, it sat on the untuned backbone and tagged worse
    without a word. Keeping one is refused before any run, naming what to do instead."""
    from layerfuse.experiments import load_live

    config = TrainConfig(fusion="base", shots=2, epochs=1, seed=0, mode="ft")
    results = tmp_path / "results.jsonl"
    for keep in ("best", "all"):
        with pytest.raises(LayerfuseError, match="an FT head needs its tuned backbone"):
            run_grid(open_entry(tiny_cache), [config], results=str(results), workers=0, load=load_live,
                     keep_heads=keep, progress=False, log=lambda m: None)
    assert not results.exists() and not (tmp_path / "heads").exists()


def test_a_cut_layer_scores_file_leaves_the_report_without_them(tmp_path, capsys):
    """A kill while the scores were written (in place) left a file every `sweep --report` failed on, in a
    JSON traceback, until someone found and deleted it; it is now written whole, and one not as written is a note."""
    from layerfuse.cli.sweep import _layer_scores

    path = tmp_path / "layer_scores.json"
    for text in ("", "[[1, 0.7", '[[1, "NaN"]]', '{"a": 1}', "[3]"):
        path.write_text(text)
        assert _layer_scores(str(tmp_path)) is None
        assert "is not a list of [layer, score] pairs (cut short or edited)" in capsys.readouterr().err
    path.write_text("[[1, 0.5], [2, null]]")
    assert _layer_scores(str(tmp_path)) == [[1, 0.5], [2, None]]


def test_nan_in_the_cached_dev_features_stops_a_sweep_in_one_line_naming_the_split(entry_copy, tmp_path):
    """A dev row of nan made every run's dev loss nan: the sweep recorded their F1s as results, exit 0."""
    import numpy as np
    import zarr

    hidden = zarr.open_group(entry_copy, mode="a")["dev"]["hidden"]  # through zarr: the checksums still agree
    hidden[4, 2, :] = np.full(hidden.shape[2], np.nan, dtype=hidden.dtype)
    out = tmp_path / "sw"
    run = CliRunner().invoke(main, ["--cache", entry_copy, "--fusions", "concat", "--shots", "2", "--epochs", "1",
                                    "--trials", "2", "--workers", "1", "--quiet", "--out", str(out)])
    errors = [line for line in run.output.splitlines() if line.startswith("error:")]
    assert run.exit_code == 1 and len(errors) == 1, run.output
    assert f"split dev of the cache entry {entry_copy} holds nan or inf hidden states (layer 2;" in errors[0]
    assert not (out / "results.jsonl").exists() or not (out / "results.jsonl").read_text()


def test_a_dev_split_without_an_entity_stops_a_sweep_before_any_run(tiny_cache, tmp_path):
    """The tiny set's chunk column is all O: every run's dev F1 was 0.0, recorded as a result."""
    out = tmp_path / "sw"
    run = CliRunner().invoke(main, ["--cache", tiny_cache, "--labels", "chunk", "--fusions", "concat", "--shots", "all",
                                    "--epochs", "1", "--trials", "1", "--workers", "1", "--quiet", "--out", str(out)])
    errors = [line for line in run.output.splitlines() if line.startswith("error:")]
    assert run.exit_code == 1 and errors == [f"error: the dev split of {tiny_cache} holds no chunk entity: its F1 is "
                                             "undefined, so no evaluation can be chosen as best; give a dev split "
                                             "with entities"], run.output
    assert not (out / "results.jsonl").exists() or not (out / "results.jsonl").read_text()
