"""A results file: one JSON line per finished run, named by its run id.

Each line is flushed and fsync'ed before the next run, so a killed grid loses at most the runs in
flight; a rerun skips every run already in the file, and a widened grid runs only what is new.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from dataclasses import MISSING
from dataclasses import fields as dataclass_fields

from ..fusions.registry import owned_options
from ..training.config import PAPER_LR, TrainConfig, default_lr

RESULTS = "results.jsonl"


# Run ids name the fields that differ from ID_BASELINE: the defaults of the first release, so that
# changing a default later does not rename every run already in a results file. They are today's
# `TrainConfig` defaults but for FIRST_RELEASE: whoever changes a default adds its old value there
# (tests/experiments/test_run_id_baseline.py pins the whole baseline).
FIRST_RELEASE = {"lr": PAPER_LR, "layer_score": "paper"}
ID_BASELINE = {**{f.name: f.default for f in dataclass_fields(TrainConfig) if f.default is not MISSING
                  and f.name != "device"}, **FIRST_RELEASE}
LEGACY = {"layer_score": FIRST_RELEASE["layer_score"]}  # what records written before a field existed ran with


def run_id(config: TrainConfig | dict) -> str:
    """Names a run by everything that changes its result: the fields that differ from
    `ID_BASELINE`, device aside (a field added later, at its baseline value, keeps old ids)."""
    given = {**LEGACY, **(config.record() if not isinstance(config, dict) else config)}
    if given.get("lr") is None:  # the default rate of its fusion: named by its value
        given["lr"] = default_lr(given["fusion"], given.get("mode", "fe"))
    owners = owned_options()  # a setting some fusions own changes only their runs' results
    fields = {f.name: given[f.name] for f in dataclass_fields(TrainConfig)
              if f.name in given and f.name != "device" and given["fusion"] in owners.get(f.name, {given["fusion"]})
              and (f.default is MISSING or given[f.name] != ID_BASELINE.get(f.name, f.default))}
    digest = hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]
    return f"{given['fusion']}-n{given['shots'] or 'all'}-e{given['epochs']}-s{given['seed']}-{digest}"


def read_results(path: str, *, skipped=None) -> dict[str, dict]:
    """Records by run id. A line cut short by a kill (bad JSON, or no newline yet) is skipped, not
    cut from the file: another sweep sharing the file may be appending it this very moment.
    ``skipped`` (a callable), when given, is told of each finished line (one that ends in a newline) that
    is skipped, in one line naming the file and line number; the last line, without its newline yet, may
    be another sweep's being written, and is passed by in silence."""
    if not os.path.exists(path):
        return {}
    records = {}
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                record = json.loads(raw)
            except ValueError:
                record = None
            if not raw.endswith(b"\n"):
                continue
            if not isinstance(record, dict):
                if skipped is not None and raw.strip():
                    shown = raw.strip()[:40].decode("utf-8", "replace")
                    skipped(f"{path}:{number}: skipped: not a JSON record ({shown!r}: cut short by a kill, "
                            "or edited)")
                continue
            if "config" in record:  # recomputed, so the ids of records from older versions still match
                record["run_id"] = run_id(record["config"])
            if "run_id" in record:
                records[record["run_id"]] = record
    return records


def runs_on(path: str, cache_key: str | None) -> dict[str, dict]:
    """The records of ``path`` made on the cache entry ``cache_key``, by run id (for results files
    that may hold runs on several caches)."""
    return {rid: r for rid, r in read_results(path).items() if r.get("cache_key") == cache_key}


def append_result(path: str, record: dict) -> None:
    """One line, written with one ``write`` in append mode (so lines of sweeps sharing the file do
    not interleave), fsync'ed; after a line a kill cut short, it starts on a fresh line. The check
    and the write hold an exclusive lock: without it, a sweep could see another's line half written,
    take it for a cut one and leave an empty line."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the file is closed
        if _ends_mid_line(path):
            line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _ends_mid_line(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"
