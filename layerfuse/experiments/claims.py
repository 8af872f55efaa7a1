"""Claims: sweeps that share a results folder share its work.

Before a run starts, its executor claims it by creating ``claims/<run id>`` with ``O_EXCL`` (only
one creator wins, on any filesystem that honours it: local disks, NFS v3+). The claiming process
keeps its claims fresh (a heartbeat thread touches them); a claim whose file this process has seen
keep one mtime for `STALE_S` seconds, timed on this machine's monotonic clock, belongs to a process
that died, and is taken over. The mtime is never compared with this machine's clock: the folder is
shared between machines whose clocks differ (and copied with ``cp -a``, which keeps times), so a
sweep on a host whose clock ran ahead took over live claims, and a claim stamped in the future was
never stale. On the owner's own host a claim is stale at once when its process no longer exists (a
sweep killed with SIGKILL and rerun does not wait). ``LAYERFUSE_CLAIM_STALE_S`` sets `STALE_S`.
A claim is removed when its run's record is in the results file, or when its run fails.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from ..files import folder_locked
from ..lifeline import Unchanged, gone_here

STALE_S = float(os.environ.get("LAYERFUSE_CLAIM_STALE_S", 90.0))  # no heartbeat for this long: the owner is gone
HEARTBEAT_S = 15.0
MISSED_BEATS = 3  # heartbeats a claim old by this machine's clock too may miss before it is taken


class Claims:
    """The claims of one process in ``folder/claims``; `start()` runs its heartbeat."""

    def __init__(self, folder: str, *, stale_s: float = STALE_S, heartbeat_s: float = HEARTBEAT_S):
        self.dir = os.path.join(folder, "claims")
        self.stale_s, self.heartbeat_s = stale_s, heartbeat_s
        self.mine: set[str] = set()
        self._unchanged = Unchanged()  # each claim file's mtime, and since when this process has seen it
        self._lock = threading.Lock()
        self._stop = threading.Event()
        os.makedirs(self.dir, exist_ok=True)

    def claim(self, run_id: str) -> bool:
        """True when this process now owns ``run_id`` (it was free, or its owner died)."""
        path = self._path(run_id)
        for _ in range(2):  # a second try after clearing a dead owner's claim
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)  # the umask decides
            except FileExistsError:
                if not self._clear_if_stale(path):
                    return False
                continue
            with os.fdopen(fd, "w") as f:
                json.dump({"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}, f)
            with self._lock:
                self.mine.add(run_id)
            return True
        return False

    def release(self, run_id: str) -> None:
        with self._lock:
            self.mine.discard(run_id)
        try:
            os.remove(self._path(run_id))
        except OSError:  # gone already, or the folder turned read-only: a dead owner's claim is stale anyway,
            pass  # and raising here would hide the error that ended the run

    def held_by_others(self, run_id: str) -> bool:
        """True while another live process holds ``run_id``."""
        path = self._path(run_id)
        return run_id not in self.mine and os.path.exists(path) and not self._is_stale(path)

    def start(self) -> Claims:
        threading.Thread(target=self._beat, daemon=True, name="layerfuse-claims").start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for run_id in list(self.mine):
            self.release(run_id)

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            with self._lock:
                mine = list(self.mine)
            for run_id in mine:
                try:
                    os.utime(self._path(run_id))
                except FileNotFoundError:  # taken over after a stall: the other owner runs it too
                    pass

    def holder(self, run_id: str) -> str:
        """Who holds ``run_id``, as its claim says (``host pid N``), for a message."""
        try:
            with open(self._path(run_id), encoding="utf-8") as f:
                owner = json.load(f)
            return f"{owner.get('host')} pid {owner.get('pid')}"
        except (OSError, ValueError, AttributeError):  # released meanwhile, or being written this instant
            return "owner unknown"

    def _is_stale(self, path: str) -> bool:
        try:
            mtime = os.path.getmtime(path)
            unchanged = self._unchanged.seconds(path, mtime)
            if unchanged > self.stale_s:  # no heartbeat seen here for the stale time, whatever the clocks say
                return True
            # old by this clock too (a sweep that died long ago, a rerun after a reboot or on another node): taken
            # once no heartbeat has been seen for a few beats, not the whole stale time; a live owner whose clock
            # is behind this one's touches it meanwhile, and is left alone
            if time.time() - mtime > self.stale_s and unchanged > MISSED_BEATS * self.heartbeat_s:
                return True
            with open(path, encoding="utf-8") as f:
                owner = json.load(f)
        except FileNotFoundError:
            return False
        except ValueError:  # being written this instant: its owner is alive
            return False
        return gone_here(owner.get("host"), owner.get("pid"))

    def _clear_if_stale(self, path: str) -> bool:
        # Under the folder's lock: two sweeps that both found the dead claim would otherwise both remove
        # a claim, the second one the first's new claim, and both run the run.
        with folder_locked(self.dir):
            if not self._is_stale(path):
                return False
            try:
                os.remove(path)
            except FileNotFoundError:  # another sweep cleared it first; the O_EXCL retry decides
                pass
            return True

    def _path(self, run_id: str) -> str:
        return os.path.join(self.dir, run_id)

