"""A run's numbers depend on its config and seed alone, not on how many workers its sweep runs: every run
uses the same intra-op threads (`runtime.run_threads`), so float sums add up in the same order."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from layerfuse.cli.sweep import main
from layerfuse.experiments.results import RESULTS, read_results

GRID = ["--fusions", "dwatt", "--shots", "4", "--epochs", "3", "--trials", "4", "--eval-points", "2",
        "--precision", "fp32", "--keep-heads", "none", "--quiet"]
TIMING = ("seconds", "load_seconds", "wall_seconds", "finished", "started")


def _numbers(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMING and "seconds" not in k}


@pytest.mark.slow
def test_a_sweeps_records_are_the_same_with_one_and_two_workers(tiny_cache, tmp_path, monkeypatch):
    monkeypatch.delenv("LAYERFUSE_NUM_THREADS", raising=False)
    records = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        result = CliRunner().invoke(main, ["--cache", tiny_cache, "--out", str(out), *GRID, "--workers", str(workers)])
        assert result.exit_code == 0, result.output
        records[workers] = {run: _numbers(r) for run, r in read_results(str(out / RESULTS)).items()}
    assert len(records[1]) == 4 and records[1] == records[2]


def test_the_default_worker_count_is_the_cores_this_process_may_use(monkeypatch):
    """A batch job given one core of a 128-core node started 128 sweep workers, each holding the train and
    dev states: the default counted the machine's cores, not the job's (its CPU affinity)."""
    import os

    from layerfuse.experiments import runner
    from layerfuse.lifeline import usable_cores
    from layerfuse.training import TrainConfig

    monkeypatch.setattr(os, "cpu_count", lambda: 128)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert usable_cores() == 1
    started = []
    monkeypatch.setattr(runner, "_local_results", lambda job, todo, queue, workers, run: started.append(workers))
    todo = [TrainConfig(fusion="concat", shots=2, epochs=1, seed=s) for s in range(4)]
    runner._results(None, todo, iter(()), workers=None, ray=None)
    assert started == [1]
