"""The extraction queue of a server: one worker thread runs one job at a time on the server's
device, and every job lives in a JSON file under the root (``ROOT/.jobs/<id>.json``, replaced
atomically on each change) so a restarted server picks up what it had not finished.

A job cut short (a kill, a crash, a shutdown) is queued again on start and simply extracted again:
`extract` resumes by unit, so the entry ends bit for bit what an uninterrupted run makes.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import uuid
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

from ..cache.usage import hold, mark_read
from ..errors import LayerfuseError
from ..extract.entry import READING_FIELDS
from ..extract.run import ExtractConfig, extract
from .admit import Refusal, admit, without_contents

SERVER_FIELDS = ("cache_dir", "device")  # the server's root and device, never a client's
OPTIONS = tuple(f.name for f in fields(ExtractConfig) if f.name not in SERVER_FIELDS)  # what a job request may set
JOBS_DIR = ".jobs"  # under the root; not an entry (no zarr.json), so listings pass it by
STOP_WAIT_SECONDS = 10.0  # at shutdown, how long to wait for the running job to reach a unit's end
# Ended jobs (done or failed) kept, the newest: each request for an entry already made adds one (what
# `extract --server` sends), and all were kept in memory, on disk, in /api/jobs and on the page for good.
KEEP_ENDED = 100
log = logging.getLogger("layerfuse.serve")


def _covers(making: list[str] | None, wanted: list[str] | None) -> bool:
    """Whether a job storing the label sets ``making`` stores every set of ``wanted`` too (None: every
    set the dataset has, read as that job reads it: a request joins only a job reading the same columns,
    which name the sets). Label sets do not change an entry's key, so the path alone does not say it."""
    return making is None or (wanted is not None and set(wanted) <= set(making))


class _Stopped(Exception):
    """Raised from the progress hook when the server shuts down: the job stops between units."""


class JobQueue:
    def __init__(self, state):
        self.state = state
        self.dir = Path(state.root) / JOBS_DIR
        self._jobs: dict[str, dict] = {}
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._worker: threading.Thread | None = None
        self._load()

    # -- what handlers and the page call ---------------------------------------------------------

    def submit(self, options: dict, *, path: str, key: str, splits: list[str], model: str,
               dataset: str) -> tuple[dict, bool]:
        """Queue an extraction of ``options`` (the request's `ExtractConfig` fields) making the entry at
        ``path``; a queued or running job already making that entry's ``splits`` and label sets is joined
        instead. ``model`` and ``dataset`` are the names the entry will carry. Returns (the job, joined)."""
        with self._changed:
            for job in self._jobs.values():
                if (job["state"] in ("queued", "running") and job["path"] == path
                        and set(splits) <= set(job["splits"])
                        and all(job["options"].get(f) == options.get(f) for f in READING_FIELDS)
                        and _covers(job["options"].get("labels"), options.get("labels"))):
                    job["requests"] += 1
                    self._save(job)
                    return _copy(job), True
            job = {"id": uuid.uuid4().hex[:12], "state": "queued", "model": model, "dataset": dataset,
                   "entry": os.path.basename(path), "path": path, "key": key, "splits": list(splits),
                   "options": options, "requests": 1, "created": _now(), "started": None, "finished": None,
                   # rows of the split being extracted (what a progress bar shows), and of every split so far
                   "progress": {"split": None, "done": 0, "total": 0}, "rows": {}, "error": None}
            self._jobs[job["id"]] = job
            self._save(job)
            self._changed.notify_all()
            return _copy(job), False

    def get(self, job_id: str) -> dict | None:
        with self._changed:
            job = self._jobs.get(job_id)
            return _copy(job) if job else None

    def list(self) -> list[dict]:
        """Every job, newest first, as JSON-able dicts."""
        with self._changed:
            jobs = [_copy(job) for job in self._jobs.values()]
        return sorted(jobs, key=lambda j: j["created"], reverse=True)

    # -- lifetime ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._stopping.clear()
        if self._worker is not None and self._worker.is_alive():  # stopped too late to be waited for: it goes on
            return
        self._worker = threading.Thread(target=self._work, name="layerfuse-jobs", daemon=True)
        self._worker.start()

    def stop(self) -> None:
        """Stop taking jobs; the running one stops at its next unit and is queued again (a thread
        that does not get there in time dies with the process, as under a kill: the cache resumes)."""
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()
        if self._worker is not None:
            self._worker.join(STOP_WAIT_SECONDS)

    def _load(self) -> None:
        """Jobs from an earlier run of the server; those it did not finish are queued again."""
        for tmp in self.dir.glob(".*.tmp"):  # a write a kill cut short; the file it was replacing stands
            tmp.unlink(missing_ok=True)
        for file in sorted(self.dir.glob("*.json")):
            try:
                job = json.loads(file.read_text())
            except (OSError, ValueError) as exc:
                log.warning("skipping unreadable job file %s: %s", file, exc)
                continue
            wrong = _not_a_job(job, file.stem)
            if wrong:
                log.warning("skipping job file %s: %s", file, wrong)
                continue
            if job.get("state") == "running":
                job.update(state="queued", started=None)
                self._save(job)
            self._jobs[job["id"]] = job
        self._forget_old()

    # -- the worker -------------------------------------------------------------------------------

    def _next(self) -> dict | None:
        with self._changed:
            while not self._stopping.is_set():
                queued = [j for j in self._jobs.values() if j["state"] == "queued"]
                if queued:
                    job = min(queued, key=lambda j: j["created"])
                    job.update(state="running", started=_now())
                    self._save(job)
                    return job
                self._changed.wait()
        return None

    def _work(self) -> None:
        while (job := self._next()) is not None:
            self._run(job)

    def _run(self, job: dict) -> None:
        def on_unit(split: str, done: int, total: int) -> None:
            with self._changed:
                job["progress"] = {"split": split, "done": done, "total": total}
                job["rows"][split] = {"done": done, "total": total}
                self._save(job)
            if self._stopping.is_set():
                raise _Stopped

        try:
            if job["options"].get("trust_remote_code") and not self.state.trust_remote_code:
                raise LayerfuseError("the job asks for trust_remote_code and this server runs without "
                                      "--trust-remote-code")
            admit(job["options"], self.state)  # again: a job queued before a restart with fewer --data-dir
            config = config_of(job["options"], state=self.state)
            result = extract(config, progress=False, log=lambda m: log.info("job %s: %s", job["id"], m),
                             on_unit=on_unit)
        except _Stopped:
            self._finish(job, state="queued", started=None)
            return
        except LayerfuseError as exc:  # a dataset changed since it was admitted: its lines stay on the server
            self._finish(job, state="failed", error=without_contents(one_line(exc)))
            return
        except Refusal as exc:
            self._finish(job, state="failed", error=str(exc))
            return
        except Exception as exc:  # a bug or a broken environment: the job says so, the server lives on
            log.exception("job %s failed", job["id"])
            self._finish(job, state="failed", error=f"{type(exc).__name__}: {one_line(exc)}")
            return
        if self.state.max_size:
            # Whoever asked for the new entry is about to read it: eviction spares it now (held as a
            # reader holds it) and takes it last later (just read).
            mark_read(result.path)
            kept = hold(result.path)
            try:
                self._collect()
            finally:
                if kept is not None:
                    kept.release()
        rows = {s.split: {"done": s.rows, "total": s.rows} for s in result.splits}
        total = sum(r["total"] for r in rows.values())
        self._finish(job, state="done", path=result.path, key=result.key, entry=os.path.basename(result.path),
                     rows=rows, progress={"split": None, "done": total, "total": total})

    def _finish(self, job: dict, **changes) -> None:
        with self._changed:
            job.update(changes)
            if job["state"] in ("done", "failed"):
                job["finished"] = _now()
            self._save(job)
            self._forget_old()

    def _forget_old(self) -> None:
        """Drop all but the `KEEP_ENDED` newest ended jobs, from memory and from disk."""
        ended = sorted((j for j in self._jobs.values() if j["state"] in ("done", "failed")),
                       key=lambda j: j.get("finished") or j["created"], reverse=True)
        for job in ended[KEEP_ENDED:]:
            del self._jobs[job["id"]]
            (self.dir / f"{job['id']}.json").unlink(missing_ok=True)

    def _collect(self) -> None:
        """Evict least recently read entries down to the server's --max-size."""
        try:
            from ..cache.gc import collect
            from ..cache.manage import bytes_on_disk
        except ImportError:
            log.warning("--max-size needs layerfuse.cache.gc, which this installation lacks")
            return
        root, limit = str(self.state.root), self.state.max_size
        try:  # each eviction said, as `layerfuse gc` says it: it deletes what someone extracted
            removed = collect(root, max_size=limit,
                              on_leftover=lambda path, size: log.warning(
                                  "--max-size: removed %s (%d bytes): what a killed removal or extract left", path,
                                  size),
                              on_skip=lambda e, why: log.warning("--max-size: kept %s: %s", e.path, why),
                              on_damaged=lambda path, size: log.warning(
                                  "--max-size: removed %s (%d bytes): its metadata cannot be read", path, size))
            for e in removed:
                log.warning("--max-size: removed %s (%s on %s, %s bytes), the least recently read", e.path, e.model,
                            e.dataset, e.bytes_on_disk)
            left = bytes_on_disk(root)
            if left is not None and left > limit:
                log.warning("--max-size: still over the limit (%d bytes left, limit %d): what is left is in use, "
                            "partial, or not an entry", left, limit)
        except Exception:  # eviction failing must not stop the queue
            log.exception("evicting entries down to %s bytes failed", self.state.max_size)

    def _save(self, job: dict) -> None:
        """Write the job's file atomically: a reader (or a kill) sees the old file or the new one."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{job['id']}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(job, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.dir / f"{job['id']}.json")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def config_of(options: dict, *, state) -> ExtractConfig:
    """The `ExtractConfig` of a job's options (JSON: lists where the config holds tuples), extracting
    into the server's root on its device."""
    given = {name: tuple(value) if isinstance(value, list) else value for name, value in options.items()}
    return ExtractConfig(**given, cache_dir=str(state.root), device=state.device)


# What a job file must hold, and of which type, for the queue to run or list it (as `submit` writes it).
JOB_FIELDS = {"id": str, "state": str, "path": str, "splits": list, "options": dict, "created": str, "requests": int,
              "rows": dict, "progress": dict}
STATES = ("queued", "running", "done", "failed")


def _not_a_job(job, stem: str) -> str | None:
    """Why a job file's JSON is not a job the queue wrote (another program's file, a hand edit), else None."""
    if not isinstance(job, dict):
        return f"a JSON {type(job).__name__}, not a job object"
    for name, kind in JOB_FIELDS.items():
        if not isinstance(job.get(name), kind):
            return f"no {kind.__name__} {name!r}"
    if job["id"] != stem:
        return f"id {job['id']!r} in a file named {stem!r}"
    if job["state"] not in STATES:
        return f"state {job['state']!r}"
    return None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _copy(job: dict) -> dict:
    """A copy the worker's later changes do not reach."""
    return json.loads(json.dumps(job))


def one_line(exc: BaseException) -> str:
    """An error message as the API and the job files carry it: its first line."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
