"""The order a sweep takes its runs in, when other sweeps may share its results folder."""

from __future__ import annotations

import os

from .claims import Claims
from .results import GrowingFile, line_record, run_id

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


class _Finished(GrowingFile):
    """The run ids in a results file of runs on the entry of ``key`` (any, for None), each line read once
    (`GrowingFile`). Parsing it whole at each claim, as every run appends, was quadratic: 70 s of bookkeeping
    for 1,000 runs, about 10 s a run when resuming beside 48,000."""

    def __init__(self, path: str, key: str | None = None):
        super().__init__(path)
        self.key = key

    def _id_of(self, raw: bytes) -> str | None:
        record = line_record(raw)
        if isinstance(record, dict) and "run_id" in record and \
                (self.key is None or record.get("cache_key") in (None, self.key)):
            return record["run_id"]
        return None


def _take(config, claims: Claims, finished: _Finished) -> bool | None:
    """True: claimed, ours to run; False: already finished by another sweep; None: held by another."""
    rid = run_id(config)
    if not claims.claim(rid):
        return None
    if rid in finished:  # another sweep ran it and released its claim before we looked
        claims.release(rid)
        return False
    return True
