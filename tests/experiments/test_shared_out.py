"""Two sweeps on one --out share the grid: every run exactly once; a killed sweep's run is taken over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from layerfuse.experiments.heads import cell_of, kept_heads
from layerfuse.experiments.results import RESULTS, read_results
from layerfuse.files import LOCK_FILE

pytestmark = pytest.mark.slow  # starts two sweep processes

GRID = ["--fusions", "base,scalarmix", "--shots", "2,4", "--epochs", "20,40", "--trials", "2", "--eval-points", "2",
        "--workers", "1", "--precision", "fp32"]


def _sweep(tiny_cache, out, pack=1, **env):
    cmd = [sys.executable, "-m", "layerfuse.cli.sweep", "--cache", tiny_cache, "--out", str(out), *GRID,
           "--pack", str(pack)]
    return subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": os.getcwd(), **env}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _ids(out):
    """The run id of each run's training, line by line."""
    path = out / RESULTS
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [r["run_id"] for r in lines]


def test_two_sweeps_on_one_out_run_every_run_once(tiny_cache, tmp_path):
    a, b = _sweep(tiny_cache, tmp_path), _sweep(tiny_cache, tmp_path)
    assert a.wait(timeout=300) == 0 and b.wait(timeout=300) == 0, a.stderr.read() + b.stderr.read()
    ids = _ids(tmp_path)
    assert len(ids) == len(set(ids)) == 16
    assert not _held(tmp_path / "claims")  # every claim released
    # The two sweeps kept one head per cell between them (the best of its 2 trials), and only those.
    records = read_results(str(tmp_path / RESULTS))
    kept = list(kept_heads(str(tmp_path / "heads")).values())
    assert sorted(cell_of(r["config"]) for r in kept) == sorted({cell_of(r["config"]) for r in records.values()})
    assert len(kept) == 8 and all((tmp_path / "heads" / r["checkpoint"]).is_file() for r in kept)
    assert len(list((tmp_path / "heads").glob("*.head.safetensors"))) == 8


def _held(claims) -> list[str]:
    """The claims in a claims folder (its lock file aside: sweeps taking over a dead claim take turns on it)."""
    return [name for name in os.listdir(claims) if name != LOCK_FILE]


@pytest.mark.parametrize("pack", [1, 3])
def test_a_killed_sweeps_claimed_run_is_taken_over(tiny_cache, tmp_path, pack):
    a = _sweep(tiny_cache, tmp_path, pack)
    claims = tmp_path / "claims"
    deadline = time.time() + 120
    while not (claims.exists() and _held(claims)) and time.time() < deadline:
        time.sleep(0.02)
    os.killpg(a.pid, signal.SIGKILL)  # the sweep and its worker: its claim stays behind
    a.wait()
    held = _held(claims)
    assert held and len(_ids(tmp_path)) < 16, "the sweep finished before the kill: it proved nothing"
    b = _sweep(tiny_cache, tmp_path, pack)
    assert b.wait(timeout=300) == 0, b.stderr.read()
    ids = _ids(tmp_path)
    assert len(ids) == len(set(ids)) == 16 and set(held) <= set(ids)
