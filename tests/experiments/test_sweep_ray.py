"""`sweep --ray`: every run a Ray task on a local Ray (2 CPUs); the results equal a local sweep's."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from layerfuse.cli.sweep import main
from layerfuse.experiments.results import RESULTS, read_results

pytestmark = pytest.mark.slow  # starts Ray

ray = pytest.importorskip("ray", reason="ray is part of the test extra")

GRID = ["--fusions", "base,concat", "--shots", "2", "--epochs", "2,3", "--trials", "2", "--eval-points", "2"]


def _ray_and_local(cache: str, tmp_path, grid: list[str], *, num_cpus: int) -> tuple[dict, dict]:
    """The records of the same sweep run as Ray tasks and in local worker processes."""
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        out = CliRunner().invoke(main, ["--cache", cache, "--out", str(tmp_path / "ray"), "--ray", *grid])
        assert out.exit_code == 0, out.output
    finally:
        ray.shutdown()
    local = CliRunner().invoke(main, ["--cache", cache, "--out", str(tmp_path / "local"), "--workers",
                                      str(num_cpus), *grid])
    assert local.exit_code == 0, local.output
    return read_results(str(tmp_path / "ray" / RESULTS)), read_results(str(tmp_path / "local" / RESULTS))


def test_ray_sweep_equals_local_sweep(tiny_cache, tmp_path):
    by_ray, by_pool = _ray_and_local(tiny_cache, tmp_path, GRID, num_cpus=2)
    assert len(by_ray) == 8 and by_ray.keys() == by_pool.keys()
    for run, record in by_pool.items():
        assert by_ray[run]["best_dev_f1"] == record["best_dev_f1"]
        assert [e["dev_loss"] for e in by_ray[run]["evals"]] == [e["dev_loss"] for e in record["evals"]]
    assert (tmp_path / "ray" / "report.md").read_text().split("seconds")[0] == \
        (tmp_path / "local" / "report.md").read_text().split("seconds")[0]


def test_ray_runs_packs_as_tasks(tiny_cache, tmp_path):
    grid = [*GRID[:-4], "--trials", "2", "--eval-points", "2", "--pack", "2"]
    by_ray, by_pool = _ray_and_local(tiny_cache, tmp_path, grid, num_cpus=1)
    assert len(by_ray) == 8 and by_ray.keys() == by_pool.keys()
    for run, record in by_pool.items():
        assert by_ray[run]["seconds"]["pack"] == 2 and by_ray[run]["best_dev_f1"] == record["best_dev_f1"]


def test_an_address_no_cluster_answers_at_is_one_line(tiny_cache, tmp_path):
    # Ray retries such an address for ever, printing only its own lines: the sweep hung
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    out = CliRunner().invoke(main, ["--cache", tiny_cache, "--out", str(tmp_path / "out"), "--fusions", "base",
                                    "--shots", "2", "--epochs", "1", "--trials", "1", "--ray", f"127.0.0.1:{port}"])
    assert out.exit_code == 1 and not ray.is_initialized(), out.output
    assert out.stderr.strip().splitlines()[-1].startswith(f"error: --ray 127.0.0.1:{port}: no Ray cluster answers")
