"""Claims: one owner per run among processes sharing a results folder; a dead owner's run is taken over."""

from __future__ import annotations

import json
import os
import time

import pytest

from layerfuse.experiments.claims import Claims
from layerfuse.experiments.queue import claimed
from layerfuse.experiments.results import run_id
from layerfuse.training.config import TrainConfig

DAY = 86400.0


@pytest.fixture
def clock(monkeypatch):
    """This machine's monotonic clock, moved by hand: ``clock[0] += seconds``."""
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    return now


def _claim_of_another_host(claims: Claims, run_id: str, *, mtime: float) -> str:
    """A claim written by a sweep on host colleague-box, its file stamped ``mtime`` by that host's clock."""
    path = os.path.join(claims.dir, run_id)
    with open(path, "w") as f:
        json.dump({"host": "colleague-box", "pid": 4242, "since": mtime}, f)
    os.utime(path, (mtime, mtime))
    return path


def test_one_owner_per_run(tmp_path):
    a, b = Claims(str(tmp_path)), Claims(str(tmp_path))
    assert a.claim("r1") and not b.claim("r1")
    assert b.held_by_others("r1") and not a.held_by_others("r1")
    a.release("r1")
    assert not b.held_by_others("r1") and b.claim("r1")


def test_a_stale_claim_is_taken_over(tmp_path, clock):
    dead = Claims(str(tmp_path), stale_s=5)
    assert dead.claim("r1")
    live = Claims(str(tmp_path), stale_s=5)
    assert live.held_by_others("r1")  # first seen: its heartbeat may come any moment
    clock[0] += 6  # no heartbeat for longer than stale_s: its process is gone
    assert not live.held_by_others("r1")
    assert live.claim("r1") and "r1" in live.mine


def test_a_live_claim_is_not_taken_over_by_a_host_whose_clock_runs_ahead(tmp_path, clock, monkeypatch):
    """A sweep on a host whose clock ran 10 minutes ahead read every claim its colleague's heartbeat had
    touched seconds ago as 10 minutes old, took them over, and trained those runs a second time."""
    claims = Claims(str(tmp_path), stale_s=90)
    path = _claim_of_another_host(claims, "r1", mtime=time.time())
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 600)
    for _ in range(20):  # the owner's heartbeat keeps touching it, every 15 s of this machine's clock
        assert not claims.claim("r1") and claims.held_by_others("r1")
        clock[0] += 15
        touched = os.path.getmtime(path) + 15  # the owner's clock moved on as much
        os.utime(path, (touched, touched))
    assert not claims.claim("r1")


def test_a_dead_claim_stamped_in_the_future_is_taken_over_once_unchanged_for_the_stale_time(tmp_path, clock):
    """A claim left by a dead sweep on a host whose clock ran a day ahead (or copied from there with
    cp -a) was never stale before its mtime came round here: a rerun waited a day, saying nothing."""
    claims = Claims(str(tmp_path), stale_s=90)
    _claim_of_another_host(claims, "r1", mtime=time.time() + DAY)
    assert not claims.claim("r1")
    clock[0] += 60
    assert not claims.claim("r1")  # 60 s unchanged: its owner may still be alive
    clock[0] += 31
    assert claims.claim("r1") and "r1" in claims.mine


def test_a_claim_old_by_this_clock_too_is_taken_after_a_few_missed_heartbeats(tmp_path, clock):
    """A rerun on another node (or after a reboot, its pid in use again) waited the whole stale time for a
    claim a day old, once claims were judged by what this machine saw change: a few missed heartbeats do."""
    claims = Claims(str(tmp_path), stale_s=90)
    _claim_of_another_host(claims, "r1", mtime=time.time() - DAY)
    assert not claims.claim("r1")  # first seen now: its owner may beat any moment
    clock[0] += 46  # three heartbeats missed
    assert claims.claim("r1")


def test_a_sweep_waiting_on_claims_held_by_others_says_so_once_naming_them(tmp_path, clock):
    """A sweep whose remaining runs were all claimed by other sweeps waited in silence, for a day when
    the claim was a dead host's stamped in the future: nothing said which claim or owner it waited on."""
    claims = Claims(str(tmp_path), stale_s=90)
    config = TrainConfig(fusion="base", shots=2, epochs=1, seed=1)
    _claim_of_another_host(claims, run_id(config), mtime=time.time() + DAY)
    said = []
    queue = claimed([config], claims, results=str(tmp_path / "results.jsonl"), done={}, log=said.append)
    assert next(queue) is None and next(queue) is None  # only another sweep's run is left
    assert len(said) == 1 and os.path.join(claims.dir, run_id(config)) in said[0]
    assert "colleague-box pid 4242" in said[0]
    clock[0] += 91  # its owner is gone: taken over, and nothing more said
    assert next(queue) == config and len(said) == 1


def test_the_heartbeat_keeps_claims_fresh_and_stop_releases_them(tmp_path):
    owner = Claims(str(tmp_path), stale_s=0.5, heartbeat_s=0.05).start()
    assert owner.claim("r1")
    time.sleep(1.0)  # longer than stale_s: only the heartbeat keeps it alive
    other = Claims(str(tmp_path), stale_s=0.5)
    assert other.held_by_others("r1") and not other.claim("r1")
    owner.stop()
    assert not os.path.exists(os.path.join(owner.dir, "r1")) and other.claim("r1")


def test_a_dead_process_on_this_host_is_stale_at_once(tmp_path):
    import json
    import socket
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    claims = Claims(str(tmp_path))
    with open(os.path.join(claims.dir, "r1"), "w") as f:  # as a killed sweep leaves it
        json.dump({"host": socket.gethostname(), "pid": int(dead.stdout), "since": time.time()}, f)
    assert not claims.held_by_others("r1") and claims.claim("r1")


def test_finished_runs_are_read_once_each_as_the_results_file_grows(tmp_path, monkeypatch):
    """Each run a sweep claims asks whether another finished it; the results file was parsed whole at each
    ask, as every run appends a line: 70 s of bookkeeping for 1,000 runs, 10 s a run beside 48,000."""
    from layerfuse.experiments import queue

    parsed = []
    real = queue.line_record
    monkeypatch.setattr(queue, "line_record", lambda raw: parsed.append(raw) or real(raw))
    configs = [TrainConfig(fusion="concat", shots=2, epochs=1, seed=s) for s in range(4)]
    path = tmp_path / "results.jsonl"
    line = {c.seed: json.dumps({"config": c.record(), "cache_key": "k", "best_dev_f1": 0.5}) + "\n" for c in configs}
    path.write_text(line[0] + line[1])
    finished = queue._Finished(str(path), "k")
    assert run_id(configs[0]) in finished and run_id(configs[1]) in finished and run_id(configs[2]) not in finished
    assert len(parsed) == 2
    with open(path, "a") as f:
        f.write(line[2] + line[3][:10])  # the last another sweep's, being written
    assert run_id(configs[2]) in finished and run_id(configs[3]) not in finished
    assert len(parsed) == 3  # the new whole line alone
    with open(path, "a") as f:
        f.write(line[3][10:])
    assert run_id(configs[3]) in finished and len(parsed) == 4
    path.write_text(line[1])  # replaced by a shorter file: read again from its start
    assert run_id(configs[0]) not in finished and run_id(configs[1]) in finished
    longer = tmp_path / "restored.jsonl"  # another file moved in, as long or longer: read again from its start
    longer.write_text(line[2] + line[3] + line[0])
    os.replace(longer, path)
    assert run_id(configs[1]) not in finished and run_id(configs[2]) in finished and run_id(configs[0]) in finished
    path.write_text("\n" + line[3] + line[1] + line[2])  # rewritten in place, longer: its old line ends moved
    assert run_id(configs[0]) not in finished and run_id(configs[3]) in finished
