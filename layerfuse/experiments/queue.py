"""The order a sweep takes its runs in, when other sweeps may share its results folder."""

from __future__ import annotations

import os

from .claims import Claims
from .results import line_record, run_id

POLL_S = 2.0  # how often a sweep with nothing left to claim looks again


SHOWN_CLAIMS = 3  # claims the line on waiting names; the rest are counted


def claimed(todo: list, claims: Claims, *, results: str, done: dict, key: str | None = None, log=None):
    """Yield each config of ``todo`` once this process has claimed it, in order; runs another
    live sweep holds are passed over, then waited for: None is yielded while only those are left
    (the caller checks back), and a run whose holder died is claimed and yielded. Ends when every
    run is in the results file or has been yielded. ``key``: the entry's cache key; a run of that id
    on another entry is not this one finished. ``log`` hears once, when only held runs are left,
    which claims and owners the sweep waits on (a sweep waiting a day on a dead host's claim said
    nothing)."""
    finished = _Finished(results, key)
    told = log is None
    waiting = []
    for config in todo:
        taken = _take(config, claims, finished)
        if taken:
            yield config
        elif taken is None:
            waiting.append(config)
    while waiting:
        waiting = [c for c in waiting if run_id(c) not in finished and run_id(c) not in done]
        for config in list(waiting):
            taken = _take(config, claims, finished)
            if taken is not None:
                waiting.remove(config)
            if taken:
                yield config
                break
        else:
            if waiting:
                if not told:
                    log(_waiting_on([run_id(c) for c in waiting], claims))
                    told = True
                yield None  # only other sweeps' runs are left: the caller waits and asks again


def _waiting_on(run_ids: list[str], claims: Claims) -> str:
    named = ", ".join(f"{os.path.join(claims.dir, rid)} (by {claims.holder(rid)})" for rid in run_ids[:SHOWN_CLAIMS])
    more = f" and {len(run_ids) - SHOWN_CLAIMS} more there" if len(run_ids) > SHOWN_CLAIMS else ""
    return (f"waiting for {len(run_ids)} run{'s' * (len(run_ids) != 1)} that other sweeps claimed: {named}{more}; "
            f"a claim whose file stays untouched for {claims.stale_s:g} s is taken over")


class _Finished:
    """The run ids in a results file of runs on the entry of ``key`` (any, for None). The file only grows
    (sweeps append a line a run): the lines past the last one read are parsed, and the whole file again
    when it was replaced (another file now, shorter, or its last line read no longer ending there).
    Parsing it whole at each claim, as every run appends, was quadratic: 70 s of bookkeeping for 1,000
    runs, about 10 s a run when resuming beside 48,000."""

    def __init__(self, path: str, key: str | None = None):
        self.path, self.key, self.offset, self.ids, self.file = path, key, 0, set(), None

    def __contains__(self, rid: str) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.offset, self.ids, self.file = 0, set(), None
            return False
        if st.st_size != self.offset or (st.st_dev, st.st_ino) != self.file:
            self._read_new(st)
        return rid in self.ids

    def _read_new(self, st) -> None:
        with open(self.path, "rb") as f:
            if (st.st_dev, st.st_ino) != self.file or st.st_size < self.offset or not self._line_ends(f):
                self.offset, self.ids, self.file = 0, set(), (st.st_dev, st.st_ino)  # replaced: read it whole
            f.seek(self.offset)
            for raw in f:
                if not raw.endswith(b"\n"):  # another sweep's line being written: read when whole
                    break
                self.offset += len(raw)
                record = line_record(raw)
                if isinstance(record, dict) and "run_id" in record and \
                        (self.key is None or record.get("cache_key") in (None, self.key)):
                    self.ids.add(record["run_id"])

    def _line_ends(self, f) -> bool:
        """Whether the last line read still ends where it did: a file rewritten in place (an editor, a restore
        onto the same file) as long or longer was read on from the middle of a line."""
        if not self.offset:
            return True
        f.seek(self.offset - 1)
        return f.read(1) == b"\n"


def _take(config, claims: Claims, finished: _Finished) -> bool | None:
    """True: claimed, ours to run; False: already finished by another sweep; None: held by another."""
    rid = run_id(config)
    if not claims.claim(rid):
        return None
    if rid in finished:  # another sweep ran it and released its claim before we looked
        claims.release(rid)
        return False
    return True
