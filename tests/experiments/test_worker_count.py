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
