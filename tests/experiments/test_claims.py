"""Claims: one owner per run among processes sharing a results folder; a dead owner's run is taken over."""

from __future__ import annotations

import os
import time

from layerfuse.experiments.claims import Claims


def test_one_owner_per_run(tmp_path):
    a, b = Claims(str(tmp_path)), Claims(str(tmp_path))
    assert a.claim("r1") and not b.claim("r1")
    assert b.held_by_others("r1") and not a.held_by_others("r1")
    a.release("r1")
    assert not b.held_by_others("r1") and b.claim("r1")


def test_a_stale_claim_is_taken_over(tmp_path):
    dead = Claims(str(tmp_path), stale_s=5)
    assert dead.claim("r1")
    past = time.time() - 60  # no heartbeat for a minute: its process is gone
    os.utime(os.path.join(dead.dir, "r1"), (past, past))
    live = Claims(str(tmp_path), stale_s=5)
    assert not live.held_by_others("r1")
    assert live.claim("r1") and "r1" in live.mine


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
