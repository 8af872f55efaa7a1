"""The probe results file, ``<out>/probe.jsonl``: one JSON line per trained probe, appended and
flushed as soon as the probe is scored, so a killed run loses at most the probe it was training and a
rerun trains only what is missing.

A record is identified by what made it: the cache entry, the label set, the probe (a layer or
``"mix"``), control or task labels, the seed, the shots and the training config. A rerun with
another config or on another entry adds its own records beside the old ones and skips none of them; so
does a rerun on a set relabelled since (its labels' fingerprints, `label_sets.same_labels`).
"""

from __future__ import annotations

import json
import os

from ..errors import LayerfuseError

FILENAME = "probe.jsonl"


def record_key(record: dict) -> tuple:
    """What identifies a record (everything that changes its numbers)."""
    return (
        record["cache"]["key"], record["label_set"], str(record["probe"]), bool(record["control"]),
        int(record["seed"]), record["shots"] or "all", json.dumps(record["config"], sort_keys=True),
    )


def read_records(path: str) -> list[dict]:
    """The records of ``path`` (none when it is missing). A last line cut short by a kill is
    dropped; an unreadable line before it is an error naming its line."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # no newline after it: the write was cut short
                continue
            raise LayerfuseError(f"{path}, line {i + 1}: not a JSON record; remove the line and rerun") from None
        if not _is_record(record):  # JSON, but another file's line ({}): a KeyError traceback at the rerun
            raise LayerfuseError(f"{path}, line {i + 1}: not a probe record (it lacks what identifies one: "
                                 f"cache key, label set, probe, control, seed, shots, config); remove the line "
                                 f"and rerun")
        records.append(record)
    return records


def _is_record(record) -> bool:
    try:
        record_key(record)
    except (KeyError, TypeError, ValueError):
        return False
    return True


def append_record(path: str, record: dict) -> None:
    """Append ``record`` as one line and flush it to disk; a last line cut short by a kill is cut
    off first, so it never ends up between two whole records."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    line = json.dumps(record, allow_nan=False) + "\n"
    try:
        with open(path, "a+b") as f:
            f.seek(0)
            text = f.read()
            if text and not text.endswith(b"\n"):
                f.truncate(text.rfind(b"\n") + 1)
            f.write(line.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:  # a full disk met in write() names no file
        raise OSError(exc.errno, exc.strerror, path) from None
