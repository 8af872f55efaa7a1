"""A sweep's main process killed with SIGKILL takes its workers with it: none is left blocked on
its queue holding its data. Checked on the sweep itself (spawn workers) and on a bare pool under
every start method, with the kernel's parent-death signal and with the watcher thread alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

GONE_WITHIN_S = 5.0  # a worker may outlive its parent by this much (the watcher looks twice a second)
# A sweep's spawned worker killed before its initializer ran (still importing torch: seconds on a
# loaded machine) leaves when it gets there and finds its parent gone: allow for the import.
SWEEP_GONE_WITHIN_S = 30.0


def _alive(pid: int) -> bool:
    """Running, not a zombie nobody reaps (a container's init may not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _children(pid: int) -> list[int]:
    """The worker processes of ``pid``: its children but multiprocessing's resource tracker, which
    is no worker and leaves on its own once every holder of its pipe is gone (under load, later
    than `GONE_WITHIN_S`)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(p) for p in f.read().split()]
    return [p for p in found if not _is_resource_tracker(p)]


def _is_resource_tracker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"resource_tracker" in f.read()
    except FileNotFoundError:
        return False


def _kill_and_wait(parent: subprocess.Popen, workers: list[int], within_s: float = GONE_WITHIN_S) -> list[int]:
    """SIGKILL the parent alone; the workers still alive after ``within_s``."""
    assert workers and all(_alive(w) for w in workers), "no live worker to orphan: the kill proves nothing"
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + within_s
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [w for w in workers if _alive(w)]


def _reap(parent: subprocess.Popen) -> None:
    """Whatever the outcome, leave no process behind (the group holds the workers too)."""
    try:
        os.killpg(parent.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    parent.wait()


@pytest.mark.slow
def test_killing_a_sweep_kills_its_workers(tiny_cache, tmp_path):
    cmd = [sys.executable, "-m", "layerfuse.cli.sweep", "--cache", tiny_cache, "--out", str(tmp_path / "out"),
           "--fusions", "base,concat", "--shots", "2,4", "--epochs", "200", "--trials", "4", "--workers", "2",
           "--quiet"]
    child = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": os.getcwd()}, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(_children(child.pid)) < 2 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = [p for p in _children(child.pid) if _alive(p)]
        time.sleep(2.0)  # let them reach their initializer, then their work
        assert _kill_and_wait(child, workers, SWEEP_GONE_WITHIN_S) == []
    finally:
        _reap(child)


# A pool whose workers call `die_with_parent` first, then report their pid and idle; ``argv[2]``
# = "watcher" takes the kernel's parent-death signal away, leaving the thread that polls getppid.
POOL = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    from concurrent.futures import ProcessPoolExecutor
    from layerfuse import lifeline

    def init(parent, watcher_only):
        if watcher_only:
            lifeline._kernel_deathsig = lambda: None
        lifeline.die_with_parent(parent)

    if __name__ == "__main__":
        method, watcher_only = sys.argv[1], sys.argv[2] == "watcher"
        pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(method), initializer=init,
                                   initargs=(os.getpid(), watcher_only))
        pids = {pool.submit(time.sleep, 0.2) and pool.submit(os.getpid).result() for _ in range(4)}
        pool.submit(time.sleep, 600)
        print(" ".join(map(str, sorted(pids))), flush=True)
        time.sleep(600)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("method, mode", [("spawn", "kernel"), ("forkserver", "kernel"), ("fork", "kernel"),
                                          ("spawn", "watcher"), ("fork", "watcher")])
def test_pool_workers_die_with_their_parent(method, mode, tmp_path):
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    child = subprocess.Popen([sys.executable, str(script), method, mode], env={**os.environ, "PYTHONPATH": os.getcwd()},
                             start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(p) for p in child.stdout.readline().split()]
        assert _kill_and_wait(child, workers) == []
    finally:
        _reap(child)


def _ctrl_c_on():
    """In the child before it runs: SIGINT as a terminal gives it, whatever this process inherited (a
    test run started in a script's background ignores SIGINT, and so would every child it starts)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_on_a_sweep_with_workers_is_one_line(tiny_cache, tmp_path):
    """Ctrl-C reaches the workers too (one process group): each printed the traceback of the queue or
    run it was in; now the sweep alone speaks, in one line, and exits 130."""
    cmd = [sys.executable, "-m", "layerfuse.cli.sweep", "--cache", tiny_cache, "--out", str(tmp_path / "out"),
           "--fusions", "base", "--shots", "2", "--epochs", "5,20000", "--trials", "1", "--workers", "2",
           "--quiet"]  # the 5-epoch run ends in seconds: its worker then waits on the queue, where Ctrl-C lands
    child = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": os.getcwd()}, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_on)
    try:
        results = tmp_path / "out" / "results.jsonl"
        deadline = time.monotonic() + 120
        # a finished run: both workers are past their start-up (a worker still importing torch in
        # multiprocessing's bootstrap has no handler of ours yet) and into their runs
        while not (results.exists() and results.stat().st_size) and child.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        os.killpg(child.pid, signal.SIGINT)
        _, err = child.communicate(timeout=60)
        assert child.returncode == 130, err
        assert "Traceback" not in err and err.strip().splitlines()[-1] == "interrupted; rerun the same command to " \
            "resume", err
    finally:
        _reap(child)


def test_a_worker_started_with_ctrl_c_ignored_keeps_ignoring_it():
    """A sweep started in the background of a script ignores SIGINT, and so did its workers: replacing
    that with an exit made a group SIGINT kill the workers under a parent that carried on."""
    from layerfuse.lifeline import quiet_on_interrupt

    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        quiet_on_interrupt()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.signal(signal.SIGINT, signal.default_int_handler)
        quiet_on_interrupt()
        assert signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.default_int_handler)
    finally:
        signal.signal(signal.SIGINT, before)
