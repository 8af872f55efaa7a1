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


def _cgroups(tmp_path, monkeypatch, proc: str, files: dict) -> None:
    """A /proc/self/cgroup of ``proc`` and a cgroup mount holding ``files`` (relative path -> content)."""
    from layerfuse import lifeline

    (tmp_path / "cgroup").write_text(proc)
    for rel, content in files.items():
        path = tmp_path / "fs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    monkeypatch.setattr(lifeline, "PROC_CGROUP", str(tmp_path / "cgroup"))
    monkeypatch.setattr(lifeline, "CGROUP_ROOT", str(tmp_path / "fs"))


@pytest.mark.parametrize("proc, files, cores", [
    ("0::/job\n", {"job/cpu.max": "150000 100000\n", "cpu.max": "max 100000\n"}, 2),  # v2: 1.5 CPUs -> 2
    ("0::/a/b\n", {"a/b/cpu.max": "max 100000\n", "a/cpu.max": "100000 100000\n"}, 1),  # a parent's quota
    ("0::/docker/host-path\n", {"cpu.max": "300000 100000\n"}, 3),  # in a container: the path is the host's
    ("2:cpu,cpuacct:/job\n1:memory:/job\n", {"cpu,cpuacct/job/cpu.cfs_quota_us": "200000\n",
                                            "cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"}, 2),  # v1
    ("0::/\n", {"cpu.max": "max 100000\n"}, 8),  # no quota: the affinity
    ("0::/\n", {}, 8),  # nothing to read
    ("\njunk\n0::/job\n", {"job/cpu.max": "200000 100000\n"}, 2),  # a line that is no cgroup's is passed by
])
def test_the_default_worker_count_keeps_to_the_cgroups_cpu_quota(tmp_path, monkeypatch, proc, files, cores):
    """A container run with docker --cpus 2 on an 8-core machine sees 8 cores in its affinity: the quota
    is what it may use, and 8 workers would share 2 cores' time."""
    import os

    from layerfuse.lifeline import usable_cores

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    _cgroups(tmp_path, monkeypatch, proc, files)
    assert usable_cores() == cores
