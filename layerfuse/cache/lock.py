"""One writer per cache entry. Local roots use a file lock beside the entry. Object stores have no
file locks, so there a lease object `<entry>.lock` is written, read back after a pause, and renewed
while the owner works; a lease that nobody renews expires, so a killed writer never blocks forever.
Its ``expires`` was stamped by the writer's clock: a lease this process has seen unchanged for
``lease_seconds`` has expired whatever that stamp says (a dead writer whose clock ran a day ahead made
others wait a day; an honest lease is renewed long before then).

The lease is a courtesy, not the safety net: every unit of an entry is computed from the same plan
and written bit for bit the same by whoever writes it, so two writers racing past the lease still
leave a correct entry; they only waste work.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid

from ..lifeline import Unchanged, gone_here
from .layout import is_remote, local_path


class EntryLock:
    def __init__(self, path: str, *, log=print, lease_seconds: float = 120.0, poll_seconds: float = 2.0):
        self.path, self.log = path, log
        self.lease_seconds, self.poll_seconds = lease_seconds, poll_seconds
        self._file_lock = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.owner = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def __enter__(self):
        if is_remote(self.path):
            self._acquire_lease()
        else:
            self._acquire_file_lock()
        return self

    def __exit__(self, *exc):
        if self._file_lock is not None:
            self._file_lock.release()
        if self._renewer is not None:
            self._stop.set()
            self._renewer.join()
            try:
                if self._read_lease().get("owner") == self.owner:
                    self.fs.rm(self.lease_path)
            except FileNotFoundError:
                pass
            except Exception:  # the store unreachable: the lease expires by itself, and the error that
                if exc[0] is None:  # ended the run (the same store gone, most likely) is the one to show
                    raise

    def _acquire_file_lock(self):
        from filelock import FileLock, Timeout

        from ..files import check_lockable

        lock_path = local_path(self.path).rstrip("/") + ".lock"
        os.makedirs(os.path.dirname(lock_path) or ".", exist_ok=True)
        check_lockable(lock_path)
        self._file_lock = FileLock(lock_path)
        try:
            self._file_lock.acquire(timeout=0)
        except Timeout:
            self.log(f"another extract is writing {self.path}; waiting for it to finish")
            self._file_lock.acquire()

    # -- object stores -------------------------------------------------------------------------

    def _acquire_lease(self):
        import fsspec

        self.fs, base = fsspec.core.url_to_fs(self.path.rstrip("/"))
        self.lease_path = base + ".lock"
        told, unchanged = False, Unchanged()
        while True:
            lease = self._read_lease()
            host, pid = (str(lease.get("owner", "")).split(":") + [""])[:2]  # an owner is host:pid:nonce
            renewed = unchanged.seconds(self.lease_path, lease) < self.lease_seconds
            if (lease and lease.get("owner") != self.owner and lease.get("expires", 0) > time.time() and renewed
                    and not gone_here(host, pid)):
                if not told:
                    self.log(f"another extract ({lease.get('owner')}) holds {self.path}; waiting for it to finish")
                    told = True
                time.sleep(self.poll_seconds)
                continue
            self._write_lease()
            time.sleep(min(1.0, self.poll_seconds))  # let a racing writer's lease land, then look again
            if self._read_lease().get("owner") == self.owner:
                break
        self._renewer = threading.Thread(target=self._renew, daemon=True)
        self._renewer.start()

    def _read_lease(self) -> dict:
        try:
            return json.loads(self.fs.cat_file(self.lease_path))
        except (FileNotFoundError, ValueError):
            return {}

    def _write_lease(self):
        body = {"owner": self.owner, "expires": time.time() + self.lease_seconds}
        self.fs.pipe_file(self.lease_path, json.dumps(body).encode())

    def _renew(self):
        while not self._stop.wait(self.lease_seconds / 3):
            self._write_lease()

