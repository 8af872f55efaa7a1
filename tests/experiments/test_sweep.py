"""`sweep`: resume after a kill (no run twice, none missing, same numbers), aggregation checked by
hand, and the report rendered from a results file alone."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from layerfuse.cli.sweep import main
from layerfuse.experiments.report import ci95, table
from layerfuse.experiments.results import RESULTS, read_results, run_id

GRID = ["--fusions", "base,concat", "--shots", "2,4", "--epochs", "20,30", "--trials", "2", "--eval-points", "2",
        "--workers", "1"]


def _lines(path):
    """The lines of each run's training."""
    text = open(path).read() if os.path.exists(path) else ""
    return text.split("\n")[:-1]  # whole lines only: the last one may be in the middle of its write


@pytest.mark.slow
def test_killed_sweep_resumes_without_repeats_or_gaps(tiny_cache, tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "layerfuse.cli.sweep", "--cache", tiny_cache, "--out", str(out), *GRID]
    child = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": os.getcwd()}, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / RESULTS
    deadline = time.time() + 180
    while len(_lines(results)) < 3 and child.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)  # the sweep and its worker processes
    child.wait()
    before = read_results(str(results))
    assert 3 <= len(before) < 16, "the sweep finished or never started: the kill proved nothing"

    rerun = CliRunner().invoke(main, ["--cache", tiny_cache, "--out", str(out), *GRID])
    assert rerun.exit_code == 0, rerun.output
    assert f"{len(before)} of 16 runs already in" in rerun.output
    ids = [json.loads(line)["run_id"] for line in _lines(results)]
    assert len(ids) == len(set(ids)) == 16  # nothing twice, nothing missing

    fresh = tmp_path / "fresh"
    assert CliRunner().invoke(main, ["--cache", tiny_cache, "--out", str(fresh), *GRID]).exit_code == 0
    want = {k: v["best_dev_f1"] for k, v in read_results(str(fresh / RESULTS)).items()}
    got = {k: v["best_dev_f1"] for k, v in read_results(str(results)).items()}
    assert got == want  # same runs, same numbers as an uninterrupted sweep

    widened = CliRunner().invoke(main, ["--cache", tiny_cache, "--out", str(fresh), *GRID[:-2], "--workers", "1",
                                        "--trials", "3"])
    assert "16 of 24 runs already in" in widened.output and len(_lines(fresh / RESULTS)) == 24


def test_a_line_cut_by_a_kill_is_skipped_and_the_next_starts_fresh(tmp_path):
    from layerfuse.experiments.results import append_result

    path = tmp_path / RESULTS
    good = json.dumps({"run_id": "a", "x": 1}) + "\n"
    path.write_text(good + '{"run_id": "b", "x"')
    assert list(read_results(str(path))) == ["a"]
    assert path.read_text().startswith(good)  # left alone: another sweep may be writing it
    append_result(str(path), {"run_id": "c", "x": 3})
    assert list(read_results(str(path))) == ["a", "c"]
    assert path.read_text().endswith('"x"\n' + json.dumps({"run_id": "c", "x": 3}) + "\n")


def test_a_skipped_line_is_reported_naming_file_and_line(tmp_path):
    """A finished line that is not a record (cut by a kill, then followed by others; or edited) was
    skipped in silence: the run it held was redone or left out of the report with nothing said."""
    path = tmp_path / RESULTS
    records = [_record("concat", 8, 25, s, 0.5) for s in range(3)]
    path.write_text(json.dumps(records[0]) + "\n" + '{"run_id": "b", "x"\n' + json.dumps(records[1]) + "\n"
                    + "\n" + json.dumps(records[2]))  # the last line unfinished: maybe being written
    told = []
    assert len(read_results(str(path), skipped=told.append)) == 2
    assert told[0] == (f"{path}:2: skipped: not a run record ('{{\"run_id\": \"b\", \"x\"': cut short by a "
                       "kill or a full disk, or edited)")
    assert told[1:] == [f"{path}:5: left out: the last line has no newline (a sweep writing it now, or an editor "
                        "dropped it): end the file with one to count the run"]
    path.write_text(path.read_text() + "\n")
    out = CliRunner().invoke(main, ["--report", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert [line for line in out.output.splitlines() if ": skipped: " in line or "left out" in line] == [told[0]]


def test_a_json_line_that_is_not_a_run_is_skipped_in_one_line(tmp_path):
    """Valid JSON that holds no run (an edited line: a config without N, a config that is a number, an
    empty object) was a traceback in sweep, --report and export, or skipped in silence."""
    path = tmp_path / RESULTS
    good = _record("concat", 8, 25, 0, 0.5)
    path.write_text("\n".join([json.dumps(good), '{"config": {"fusion": "concat"}}', '{"config": 5}', "{}"]) + "\n")
    told = []
    assert list(read_results(str(path), skipped=told.append)) == [run_id(good["config"])]
    assert [line.split(": skipped: ")[0] for line in told] == [f"{path}:{n}" for n in (2, 3, 4)]
    out = CliRunner().invoke(main, ["--report", "--out", str(tmp_path)])
    assert out.exit_code == 0 and "Traceback" not in out.output, out.output


def _record(fusion, shots, epochs, seed, f1):
    return {"run_id": f"{fusion}-{shots}-{epochs}-{seed}", "config": {"fusion": fusion, "shots": shots,
            "epochs": epochs, "seed": seed}, "best_dev_f1": f1, "model": "m", "dataset": "d",
            "evals": [{"step": 1, "dev_f1": f1 / 2}, {"step": 2, "dev_f1": f1}], "seconds": {"total": 1.0}}


def test_ci95_by_hand():
    mean, half = ci95([0.5, 0.6, 0.7])
    assert mean == pytest.approx(0.6)
    assert half == pytest.approx(4.302652729911275 * 0.1 / math.sqrt(3))  # t(0.975, 2) * s / sqrt(n)
    assert ci95([0.4]) == (0.4, 0.0)


def test_report_renders_from_results_file(tmp_path):
    records = [_record(f, n, e, s, f1) for f, base in (("concat", 0.5), ("dwatt", 0.6)) for n in (8, 16)
               for e in (25, 50) for s, f1 in enumerate((base, base + 0.1, base + 0.2))]
    with open(tmp_path / RESULTS, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    out = CliRunner().invoke(main, ["--report", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    half = 4.302652729911275 * 10 / math.sqrt(3)
    assert f"| concat | 8 | 50 | 5e-05 | 60.0 ± {half:.1f} (3) | - |" in out.output
    # older records: the paper's score
    assert f"| dwatt (paper) | 16 | 25 | 5e-05 | 70.0 ± {half:.1f} (3) | - |" in out.output
    for name in ("report.md", "f1_vs_shots.png", "f1_vs_step.png"):
        assert (tmp_path / name).stat().st_size > 300
    assert table(records).count("\n") == 9  # header, rule, 8 rows


def test_report_picks_the_learning_rate_on_dev_and_reports_test_there():
    def run(lr, seed, dev, test):
        r = _record("concat", 8, 25, seed, dev)
        r["config"].update(lr=lr)
        r["test_f1_at_best"] = test
        return r

    records = [run(1e-3, 0, 0.50, 0.10), run(1e-3, 1, 0.70, 0.30),  # mean dev 0.60: chosen
               run(5e-5, 0, 0.55, 0.90), run(5e-5, 1, 0.55, 0.90)]  # mean dev 0.55, better test: not chosen
    half = 12.706204736174707 * 20 * math.sqrt(0.5) / math.sqrt(2)  # t(0.975, 1) * s / sqrt(n)
    row = f"| concat | 8 | 25 | 0.001 of 2 | 60.0 ± {half:.1f} (2) | 20.0 ± {half:.1f} (2) |"
    assert row in table(records).splitlines()


def test_report_without_results_is_one_line_error(tmp_path):
    out = CliRunner().invoke(main, ["--report", "--out", str(tmp_path)])
    assert out.exit_code == 1 and out.output.startswith("error: no results")


def test_an_out_of_another_entrys_runs_is_refused_and_the_report_covers_the_whole_out(tiny_cache, tmp_path):
    out = tmp_path / "out"
    small = ["--cache", tiny_cache, "--out", str(out), "--shots", "2", "--epochs", "1", "--trials", "1",
             "--eval-points", "1", "--workers", "1", "--quiet"]
    first = CliRunner().invoke(main, [*small, "--fusions", "concat"])
    second = CliRunner().invoke(main, [*small, "--fusions", "base"])  # another grid into the same --out
    assert first.exit_code == second.exit_code == 0, first.output + second.output
    report = (out / "report.md").read_text()
    assert "2 runs;" in report and "| base |" in report and "| concat |" in report  # not the last grid's alone

    lines = (out / RESULTS).read_text().splitlines()
    moved = [json.dumps({**json.loads(line), "cache_key": "another-entry", "cache_path": "/elsewhere/entry"})
             for line in lines]
    (out / RESULTS).write_text("\n".join(moved) + "\n")  # the same run ids, made on another entry
    again = CliRunner().invoke(main, [*small, "--fusions", "concat"])
    assert again.exit_code == 1, again.output  # it was "already done", exit 0, with the other entry's numbers
    assert "holds runs on another cache entry" in again.stderr and "/elsewhere/entry" in again.stderr
    assert (out / RESULTS).read_text().splitlines() == moved  # nothing trained, nothing written


def test_the_default_layers_written_out_are_the_default_runs(tiny_cache, tmp_path):
    """`--layers all` (or 1..L) reran every default run and the report averaged each seed with itself:
    two trials shown as four, with a narrower interval."""
    small = ["--cache", tiny_cache, "--out", str(tmp_path), "--fusions", "base", "--shots", "2", "--epochs", "2",
             "--trials", "2", "--eval-points", "1", "--workers", "1"]
    first = CliRunner().invoke(main, small)
    assert first.exit_code == 0, first.output
    for spec in ("all", "1..2", "1,2"):  # the tiny cache has L = 2
        again = CliRunner().invoke(main, [*small, "--layers", spec])
        assert again.exit_code == 0, again.output
        assert "2 of 2 runs already in" in again.output
    assert len(_lines(tmp_path / RESULTS)) == 2
    assert run_id({"fusion": "base", "shots": 2, "epochs": 2, "seed": 0, "layers": "all"}) == \
        run_id({"fusion": "base", "shots": 2, "epochs": 2, "seed": 0})  # a record written with `all`


def test_one_set_of_layers_spelled_otherwise_is_one_run(tiny_cache, tmp_path):
    """`--layers 2,0`, then `0,2`, `0,L` and with spaces: each was a run and a report row of its own, the same
    run four times. The recorded spelling names the set, so runs recorded before keep their ids."""
    small = ["--cache", tiny_cache, "--out", str(tmp_path), "--fusions", "base", "--shots", "2", "--epochs", "1",
             "--trials", "1", "--eval-points", "1", "--workers", "1", "--keep-heads", "none"]
    for spec in ("2,0", "0,2", "0,L", " 0 , 2 "):  # the tiny cache has L = 2
        result = CliRunner().invoke(main, [*small, "--layers", spec])
        assert result.exit_code == 0, result.output
    [line] = _lines(tmp_path / RESULTS)
    assert json.loads(line)["config"]["layers"] == "2,0"  # the first spelling, its id kept for every later one
    from layerfuse.layers.spec import layer_set

    assert {layer_set(s, num_layers=12) for s in ("12,10,11", "10-12", "10..L", "10..12")} == {(10, 11, 12)}


def test_curve_shots_no_run_will_have_is_refused_before_any_run(tiny_cache, tmp_path):
    """`--curve-shots 999` trained the whole grid, kept its heads, then stopped in the report."""
    args = ["--cache", tiny_cache, "--out", str(tmp_path), "--fusions", "base", "--shots", "2", "--epochs", "1",
            "--trials", "1", "--eval-points", "1", "--workers", "1", "--curve-shots", "999"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and not (tmp_path / RESULTS).exists(), result.output
    assert "--curve-shots 999: no run has that N (the grid's and the runs' N: 2)" in result.output


def test_a_setting_written_at_the_value_its_default_picks_is_the_default_run(tiny_cache, tmp_path):
    """`--extra-layers 1` on a backbone where the default picks 1 trained every run again and the
    report showed "extra" and "extra (extra layers 1)", two rows of the same runs."""
    small = ["--cache", tiny_cache, "--out", str(tmp_path), "--fusions", "extra", "--shots", "2", "--epochs", "1",
             "--trials", "2", "--eval-points", "1", "--workers", "1"]
    first = CliRunner().invoke(main, small)
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(main, [*small, "--extra-layers", "1"])  # the tiny cache has L = 2: one extra layer
    assert again.exit_code == 0, again.output
    assert "2 of 2 runs already in" in again.output and "extra layers 1" not in again.output
    assert len(_lines(tmp_path / RESULTS)) == 2
    deeper = CliRunner().invoke(main, [*small, "--extra-layers", "2"])
    assert deeper.exit_code == 0 and "| extra (extra layers 2) |" in deeper.output, deeper.output


def test_the_api_runs_the_default_layers_once_however_written(tiny_cache, tmp_path):
    """run_sweep trained `layers="1..L"` beside the default run: `all` alone was named the default."""
    from layerfuse.cache.reader import open_entry
    from layerfuse.experiments import run_sweep
    from layerfuse.training import TrainConfig

    base = dict(fusion="base", shots=2, epochs=1, seed=0, eval_points=1)
    configs = [TrainConfig(**base), TrainConfig(**base, layers="1..2"), TrainConfig(**base, layers="2,1"),
               TrainConfig(**base, labels="ner")]  # the primary set, named: it was a run and a row of its own
    records = run_sweep(open_entry(tiny_cache), configs, out=str(tmp_path), workers=0, progress=False,
                        log=lambda m: None)
    assert len(records) == 1 and len(_lines(tmp_path / RESULTS)) == 1
