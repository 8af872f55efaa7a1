"""Worker processes die with the process that started them.

A worker of a process pool blocks on its call queue; when its parent is killed outright (SIGKILL,
the OOM killer) nothing ever closes that queue, so the worker, holding a split in memory, waits
forever. `die_with_parent` is a pool initializer's first call in the worker:

- on Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` asks the kernel to kill the worker the moment its
  parent dies (strictly: when the parent's thread that started it ends; pools start workers from
  the thread that submits, which lives as long as the pool);
- everywhere, a daemon thread looks every `WATCH_SECONDS` at ``os.getppid()`` (once the parent is
  gone the worker is re-parented to init or a subreaper, and the id changes) and at the process
  that made the pool (under forkserver the parent is the fork server, not that process); once
  either is gone, it exits.

Both hold for every start method (spawn, fork, forkserver): they look only at the worker itself.

`exists` is the one test of whether a process still exists, which the watch uses and so do the owners
of leases, claims and half-written shards (`gone_here`: a process of this host that is gone). An owner
on another host is judged by whether its mark (a file's mtime, a lease's body) keeps changing, timed on
this machine's monotonic clock (`Unchanged`): that host's clock, which stamped the mark, may differ from
this one's by minutes or days.

`usable_cores` is how many cores this process may run on (its affinity and its cgroup's CPU quota), which
sizes its pools of workers.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCH_SECONDS = 0.5  # how long an orphan outlives its parent where prctl is not available


def quiet_on_interrupt() -> None:
    """Ctrl-C reaches a pool's workers with their parent (one process group): a worker then exits at
    once, without the traceback of the queue or run it was in; the parent says what was interrupted,
    and whatever the worker had not finished is redone on the rerun, as after a kill. A worker that
    inherited SIGINT ignored (a sweep started in the background of a script) keeps ignoring it, as its
    parent does."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(128 + signum))


def die_with_parent(origin: int) -> None:
    """Make this process exit once its parent dies, or process ``origin`` (the one that made the
    pool: the parent under spawn and fork, the grandparent under forkserver) is gone."""
    parent = os.getppid()
    _kernel_deathsig()
    if _orphaned(parent, origin):  # it died before the kernel was told
        os._exit(1)
    threading.Thread(target=_watch, args=(parent, origin), name="layerfuse-lifeline", daemon=True).start()


def _kernel_deathsig() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no libc symbol (a static or odd runtime): the watcher remains
        pass


def _watch(parent: int, origin: int) -> None:
    stop = threading.Event()  # never set: a sleep that the interpreter can end at exit
    while not stop.wait(WATCH_SECONDS):
        if _orphaned(parent, origin):
            os._exit(1)


def _orphaned(parent: int, origin: int) -> bool:
    """Re-parented (the parent's id is no longer ours), or ``origin`` no longer exists."""
    return os.getppid() != parent or not exists(origin)


def exists(pid) -> bool:
    """Whether process ``pid`` exists. One of another user counts (pid reuse: not ours to judge), and so
    does a pid that is no number (nothing to judge by)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError):
        return True
    return True


def gone_here(host, pid) -> bool:
    """Whether the owner ``host``/``pid`` of a lease or a claim was a process of this host that no longer
    exists: its lease or claim is taken at once, not after it expires."""
    return host == socket.gethostname() and not exists(pid)


class Unchanged:
    """How long each watched mark has kept one value, on this machine's monotonic clock, counted from when
    this object first saw that value: no other machine's clock enters, so a mark stamped by a clock ahead
    or behind ages here as fast as any other."""

    def __init__(self):
        self._seen: dict = {}  # key -> (value, monotonic time it was first seen)

    def seconds(self, key, value) -> float:
        seen = self._seen.get(key)
        if seen is None or seen[0] != value:
            seen = self._seen[key] = (value, time.monotonic())
        return time.monotonic() - seen[1]


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (taskset, a Slurm job's or a container's cpuset),
    cut to its cgroup's CPU quota (docker --cpus, Kubernetes limits), not the whole machine's, which started
    128 sweep workers, each holding the train and dev states, in a job given one core of a 128-core node."""
    try:
        cores = len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity to read (macOS)
        cores = os.cpu_count() or 1
    quota = quota_cores()
    return min(cores, quota) if quota else cores


CGROUP_ROOT = "/sys/fs/cgroup"
PROC_CGROUP = "/proc/self/cgroup"


def quota_cores() -> int | None:
    """The tightest CPU quota over this process's cgroup and the cgroups above it, in whole cores rounded up
    (1.5 CPUs is 2 workers); None where there is none or it cannot be read. cgroup v2 writes it to
    ``cpu.max`` (``max 100000`` is none), v1 to ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` (-1 is none).
    The walk goes up to the mount's root because inside a container the path /proc names is the host's,
    while the container's own limit sits at its root."""
    try:
        with open(PROC_CGROUP, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        if line.count(":") < 2:  # no line of the kernel's: nothing to read from it
            continue
        _, controllers, path = line.split(":", 2)
        v2 = controllers == ""
        if not v2 and "cpu" not in controllers.split(","):
            continue
        root = CGROUP_ROOT if v2 else os.path.join(CGROUP_ROOT, controllers)
        folder = os.path.join(root, path.strip("/"))
        while True:
            limits.append(_quota(folder, v2))
            if os.path.normpath(folder) == os.path.normpath(root):
                break
            folder = os.path.dirname(folder)
    limits = [n for n in limits if n]
    return min(limits) if limits else None


def _quota(folder: str, v2: bool) -> int | None:
    """The quota of the cgroup ``folder`` in whole cores, rounded up; None for none, or nothing to read."""
    try:
        if v2:
            with open(os.path.join(folder, "cpu.max"), encoding="ascii") as f:
                quota, period = (f.read().split() + ["100000"])[:2]
        else:
            with open(os.path.join(folder, "cpu.cfs_quota_us"), encoding="ascii") as f:
                quota = f.read().strip()
            with open(os.path.join(folder, "cpu.cfs_period_us"), encoding="ascii") as f:
                period = f.read().strip()
        quota, period = int(quota), int(period)
    except (OSError, ValueError):  # no such file, "max", or not a number
        return None
    return -(-quota // period) if quota > 0 and period > 0 else None
