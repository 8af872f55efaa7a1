"""The order a sweep takes its runs in, when other sweeps may share its results folder."""

from __future__ import annotations

import time

from .claims import Claims
from .results import read_results, run_id

POLL_S = 2.0  # how often a sweep with nothing left to claim looks again


def claimed(todo: list, claims: Claims, *, results: str, done: dict):
    """Yield each config of ``todo`` once this process has claimed it, in order; runs another
    live sweep holds are passed over, then waited for: None is yielded while only those are left
    (the caller checks back), and a run whose holder died is claimed and yielded. Ends when every
    run is in the results file or has been yielded."""
    waiting = []
    for config in todo:
        if claims.claim(run_id(config)):
            yield config
        else:
            waiting.append(config)
    while waiting:
        finished = read_results(results)
        waiting = [c for c in waiting if run_id(c) not in finished and run_id(c) not in done]
        taken = next((c for c in waiting if not claims.held_by_others(run_id(c)) and claims.claim(run_id(c))), None)
        if taken is not None:
            waiting.remove(taken)
            yield taken
        elif waiting:
            yield None
            time.sleep(0)  # the caller decides how long to wait
