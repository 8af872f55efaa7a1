"""A results file: one JSON line per finished run, named by its run id.

Each line is flushed and fsync'ed before the next run, so a killed grid loses at most the runs in
flight; a rerun skips every run already in the file, and a widened grid runs only what is new.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import threading
from dataclasses import MISSING
from dataclasses import fields as dataclass_fields

from ..errors import LayerfuseError
from ..files import flocked, json_text
from ..fusions.registry import FUSIONS, declared_options
from ..training.config import INTEGER_FIELDS, NUMBER_FIELDS, PAPER_LR, TrainConfig, default_lr, diverged_at

RESULTS = "results.jsonl"
UNNAMED = ("device", "options")  # fields that name no run: where it ran; the settings, named one by one


# Run ids name the fields that differ from `id_baseline`: the defaults of the first release, so that
# changing a default later does not rename every run already in a results file. They are today's
# `TrainConfig` defaults but for FIRST_RELEASE: whoever changes a default adds its old value there
# (tests/experiments/test_run_id_baseline.py pins the whole baseline); a fusion's own setting is
# named against what ran before it existed (`Option.before`), and only in its fusion's runs.
FIRST_RELEASE = {"lr": PAPER_LR}


def id_baseline() -> dict:
    """Each field and fusion's setting -> the value a run id leaves unnamed."""
    fields = {f.name: f.default for f in dataclass_fields(TrainConfig) if f.default is not MISSING
              and f.name not in UNNAMED}
    return {**fields, **FIRST_RELEASE, **{name: option.legacy for name, option in declared_options().items()}}


def run_id(config: TrainConfig | dict) -> str:
    """Names a run by everything that changes its result: the fields and its fusion's own settings
    that differ from `id_baseline`, device aside (a field or a setting added later, at its baseline
    value, keeps old ids; a record without it ran that value)."""
    given = config.record() if not isinstance(config, dict) else config
    if str(given.get("layers") or "").strip().lower() == "all":  # the default layers, written out: the default run
        given = {**given, "layers": None}
    if given.get("lr") is None:  # the default rate of its fusion: named by its value
        given = {**given, "lr": default_lr(given["fusion"], given.get("mode", "fe"))}
    fusion = FUSIONS.get(given["fusion"])
    names = [f.name for f in dataclass_fields(TrainConfig) if f.name not in UNNAMED]
    if fusion is not None and not fusion.reads_query_layer:  # no z_L to read: a record saying top ran as fused
        names.remove("query_layer")
    names += [option.name for option in getattr(fusion, "options", ()) if option.names_run]
    baseline = id_baseline()
    fields = {name: given[name] for name in names
              if name in given and (name not in baseline or given[name] != baseline[name])}
    digest = hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]
    return f"{given['fusion']}-n{given['shots'] or 'all'}-e{given['epochs']}-s{given['seed']}-{digest}"


def read_results(path: str, *, skipped=None) -> dict[str, dict]:
    """Records by run id. A line cut short by a kill (bad JSON, or no newline yet) is skipped, not
    cut from the file: another sweep sharing the file may be appending it this very moment.
    ``skipped`` (a callable), when given, is told of each finished line (one that ends in a newline) that
    is skipped, in one line naming the file and line number; the last line, without its newline yet, may
    be another sweep's being written: passed by, in silence unless it holds a whole record (an editor
    that drops the final newline made the last run vanish from the report without a word)."""
    if not os.path.exists(path):
        return {}
    if os.path.isdir(path):  # a sweep's --out, say: its results are the results.jsonl inside
        raise LayerfuseError(f"{path} is a folder; a results file is a JSON-lines file (a sweep's: "
                             f"{os.path.join(path, RESULTS)})")
    records = {}
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                record = line_record(raw)
            except LayerfuseError as exc:  # a run of a fusion this process does not know, say
                raise LayerfuseError(f"{path}:{number}: {exc}") from None
            if not raw.endswith(b"\n"):  # a sweep writes a line and its newline at once: a whole record is an edit's
                if skipped is not None and isinstance(record, dict) and "config" in record:
                    skipped(f"{path}:{number}: left out: the last line has no newline (a sweep writing it now, "
                            "or an editor dropped it): end the file with one to count the run")
                continue
            if not isinstance(record, dict) or "run_id" not in record:
                if skipped is not None and raw.strip():
                    shown = raw.strip()[:40].decode("utf-8", "replace")
                    skipped(f"{path}:{number}: skipped: not a run record ({shown!r}: cut short by a kill or a "
                            "full disk, or edited)")
                continue
            _refuse_unregistered_twins(path, number, record, records)
            newer = _unknown_settings(record)
            if newer:  # named in no run id here: it would overwrite, or be averaged with, a run without it
                raise LayerfuseError(f"{path}:{number}: run {record['run_id']} records setting"
                                     f"{'s' * (len(newer) > 1)} {', '.join(newer)}, which this release does not "
                                     "know (a newer release's run?): read the file with the release that wrote it")
            impossible = _impossible_value(record)
            if impossible:  # a table of "nan +- nan" or of an F1 of 5e10 would be read as a result
                raise LayerfuseError(f"{path}:{number}: run {record['run_id']} records {impossible}: the file was "
                                     "edited or damaged; remove that line (the run is then redone) or restore the file")
            other = records.get(record["run_id"])
            if other is not None and other.get("cache_key") != record.get("cache_key"):
                raise LayerfuseError(f"{path}:{number}: run {record['run_id']} is there on two cache entries "
                                     f"({other.get('dataset')}, {record.get('dataset')}): a results file holds the "
                                     "runs of one entry (a run id does not name it)")
            records[record["run_id"]] = record
    return records


def line_record(raw: bytes):
    """One line of a results file as JSON, a run's with its run id recomputed (so the ids of records from
    older versions still match); None for a line that is not JSON, or a config without a run's fields
    (fusion, N, epochs, seed: edited by hand)."""
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if isinstance(record, dict) and isinstance(record.get("config"), dict):
        _perplexities_read(record)
        try:
            record["run_id"] = run_id(record["config"])
        except (KeyError, TypeError, ValueError):
            return None
    return record


RUN_FIELDS = frozenset(f.name for f in dataclass_fields(TrainConfig))  # what a run's config may hold, fusions aside
BEST_SCORES = ("best_dev_f1", "best_dev_accuracy", "best_dev_ppl")  # one of them, by the run's metric
SHARES = ("best_dev_f1", "test_f1_at_best", "best_dev_accuracy", "test_accuracy_at_best")  # in [0, 1]


def _refuse_unregistered_twins(path: str, number: int, record: dict, records: dict) -> None:
    """A fusion this process has not registered (a user's, defined in their code) names no option in its run
    ids here: two of its runs that differ only in one would be one run, the later line kept in silence."""
    config = record.get("config")
    other = records.get(record["run_id"])
    if not isinstance(config, dict) or config.get("fusion") in FUSIONS or other is None:
        return
    differ = sorted(k for k in (set(config) | set(other["config"])) - RUN_FIELDS
                    if config.get(k) != other["config"].get(k))
    if differ:
        raise LayerfuseError(f"{path}:{number}: runs of fusion {config['fusion']!r}, which this process has not "
                             f"registered, differ only in {', '.join(differ)}: they cannot be told apart here; "
                             "import the module that registers it and report them from Python")


def _unknown_settings(record: dict) -> list[str]:
    """The settings of ``record``'s config that are neither a `TrainConfig` field nor a fusion's option."""
    config = record.get("config")
    if not isinstance(config, dict) or config.get("fusion") not in FUSIONS:
        return []  # a fusion this process has not registered (a user's, defined in their code): its options unknown
    return sorted(set(config) - RUN_FIELDS - set(declared_options()))


def _perplexities_read(record: dict) -> None:
    """An MLM run's perplexity written as null (valid JSON has no inf: a dev loss past exp's range, or a
    diverged run) read back as inf, as it was measured: the run is still scored by perplexity, the worst one,
    where a null made the whole file refused as holding no best dev score."""
    for name in ("best_dev_ppl", "test_ppl_at_best"):
        if name in record and record[name] is None:
            record[name] = math.inf


def _impossible_value(record: dict) -> str | None:
    """A recorded score, time or setting no run can have (an F1 outside [0, 1] or nan, a negative or
    nan time, no best dev score at all, a count or a rate that is text: the report failed on them
    in a traceback)."""
    config = record.get("config")
    for name in INTEGER_FIELDS + NUMBER_FIELDS if isinstance(config, dict) else ():
        value = config.get(name)
        kind = int if name in INTEGER_FIELDS else (int, float)
        wrong = isinstance(value, bool) or not isinstance(value, kind)
        if wrong and (value is not None or name in ("epochs", "seed")) and not (name == "shots" and value == "all"):
            return f"config.{name} = {value!r}"
    if isinstance(config, dict) and not isinstance(config.get("fusion"), str):
        return f"config.fusion = {config.get('fusion')!r}"
    if isinstance(config, dict) and all(record.get(name) is None for name in BEST_SCORES):
        return f"no best dev score ({', '.join(BEST_SCORES)})"
    for name, kind in (("evals", list), ("seconds", dict)):
        if name in record and not isinstance(record[name], kind):
            return f"{name} = {record[name]!r:.40}"
    for name in SHARES:
        value = record.get(name)
        if value is not None and not (isinstance(value, (int, float)) and 0 <= value <= 1):
            return f"{name} = {value!r}"
    seconds = record.get("seconds")
    for name, value in (seconds.items() if isinstance(seconds, dict) else ()):
        if value is not None and not (isinstance(value, (int, float)) and 0 <= value < math.inf):
            return f"seconds.{name} = {value!r}"
    return None


def diverged(record: dict) -> bool:
    """Whether a run's record shows it diverged (`diverged_at` of its evaluations): its scores are a broken
    head's, never the best of anything."""
    evals = record.get("evals")
    return diverged_at(evals if isinstance(evals, list) else []) is not None


def scored_by(record: dict) -> str:
    """The metric a run's record is scored by: accuracy (a token-level label set such as POS),
    perplexity (MLM) or F1 (span label sets: NER, chunks)."""
    if record.get("best_dev_accuracy") is not None:
        return "accuracy"
    return "perplexity" if record.get("best_dev_ppl") is not None else "F1"


def label_set_of(record: dict) -> str:
    """The label set a run trained on: as its record names it (``label_set``, ``config.labels``), else the
    task's (``ner``: what a record that names none, of a run on an entry's primary set, has always meant)."""
    return str(record.get("label_set") or record["config"].get("labels") or record["config"].get("task") or "ner")


def label_sets_of(records) -> dict[str, str]:
    """`label_set_of` each record of one results file (one entry), by run id; one that names no set (a run on
    the entry's primary set, written before records named it) takes the name that newer runs of the primary
    set give it: a POS sweep resumed after an upgrade is one set, not "ner" and "pos"."""
    records = list(records)
    primary = next((r["label_set"] for r in records if r.get("label_set") and not r["config"].get("labels")), None)
    return {r["run_id"]: primary if primary and not (r.get("label_set") or r["config"].get("labels"))
            else label_set_of(r) for r in records}


def refuse_mixed_metrics(records, where: str, *, adding: tuple[str, str] | None = None) -> None:
    """One report (one --best) compares one metric: records of ``where`` scored by two are one line.
    ``adding``: the (metric, label set) of runs about to join them."""
    by_metric: dict[str, set] = {}
    for r in records:
        by_metric.setdefault(scored_by(r), set()).add(label_set_of(r))
    if adding:
        by_metric.setdefault(adding[0], set()).add(adding[1])
    if len(by_metric) > 1:
        said = " and ".join(f"{m} ({', '.join(sorted(map(str, sets)))})" for m, sets in sorted(by_metric.items()))
        raise LayerfuseError(f"{where} holds runs scored by {said}: a report or --best compares one metric; "
                             "sweep each into its own --out")


def runs_on(path: str, cache_key: str | None) -> dict[str, dict]:
    """The records of ``path`` made on the cache entry ``cache_key``, by run id (for results files
    that may hold runs on several caches)."""
    return {rid: r for rid, r in read_results(path).items() if r.get("cache_key") == cache_key}


def append_result(path: str, record: dict) -> bool:
    """One line, written in append mode (so lines of sweeps sharing the file do not interleave),
    fsync'ed; after a line a kill cut short, it starts on a fresh line. The check and the write hold
    an exclusive lock: without it, a sweep could see another's line half written, take it for a cut
    one and leave an empty line. A run the file already holds is not written again (two sweeps ran it:
    one stalled past its claim's stale time); returns whether the line was written. A short write (a
    full disk, a file size limit) is an `OSError` naming the file, never a line silently cut."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    line = (json_text(record) + "\n").encode()  # valid JSON: a nan loss written as null
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # the umask decides who else appends
    try:
        flocked(fd, fcntl.LOCK_EX, path)  # released when the file is closed
        if record.get("run_id") and recorded(path, record["run_id"]):
            return False
        if _ends_mid_line(path):
            line = b"\n" + line
        view = memoryview(line)
        while view:  # os.write may write part of it (a file size limit): the rest, or the error it meets
            view = view[os.write(fd, view):]
        os.fsync(fd)
        return True
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from None
    finally:
        os.close(fd)


RECORDED_FILES = 8  # results files whose run ids a process keeps between records: a sweep records into one
_recorded: dict[str, _Recorded] = {}  # by absolute path, the latest asked last
_recorded_lock = threading.Lock()  # the readers' offsets, shared by the threads of a process


def recorded(path: str, rid: str) -> bool:
    """Whether the results file ``path`` holds a finished line of run ``rid`` (the id its record carries). A
    process reads each line once (`GrowingFile`): asked twice at each run, reading the file whole grew with
    the square of the runs (tens of ms a run beside 32,000)."""
    where = os.path.abspath(path)
    with _recorded_lock:
        index = _recorded.pop(where, None) or _Recorded(where)
        _recorded[where] = index
        while len(_recorded) > RECORDED_FILES:
            del _recorded[next(iter(_recorded))]
        return rid in index


class GrowingFile:
    """The run ids of the finished lines of a file that only grows (sweeps append a line a run), each line read
    once: `look` parses the lines past the last one read, and the whole file again when it was replaced or
    rewritten. Replaced is: another file now, a shorter one, or one whose bytes where the last line read ended
    are no longer that line (a file deleted and made again often gets the inode back at once, and lines of one
    length put every line end where it was); a file left as it was keeps its size and modification time. A
    line without its newline yet (another sweep's being written, or cut short by a kill) is read when whole;
    which run a line counts for is the subclass's `_id_of`."""

    def __init__(self, path: str):
        self.path, self.offset, self.file, self.last, self.seen = path, 0, None, b"", None
        self.ids: set[str] = set()

    def __contains__(self, rid: str) -> bool:
        self.look()
        return rid in self.ids

    def look(self) -> None:
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            self._restart(None)
            return
        with f:
            st = os.fstat(f.fileno())  # of the file opened: one moved in after a stat is not read as the old one
            file, seen = (st.st_dev, st.st_ino), (st.st_size, st.st_mtime_ns)
            if file == self.file and seen == self.seen:
                return
            if file != self.file or st.st_size < self.offset or not self._same_last_line(f):
                self._restart(file)
            f.seek(self.offset)
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                self.offset += len(raw)
                self.last = raw
                rid = self._id_of(raw)
                if rid is not None:
                    self.ids.add(rid)
            self.seen = seen

    def _restart(self, file) -> None:
        self.offset, self.file, self.last, self.seen, self.ids = 0, file, b"", None, set()

    def _same_last_line(self, f) -> bool:
        """Whether the last line read is still where it was, byte for byte: a file rewritten in place or made
        again (an editor, a restore, another sweep starting the file anew) was read on from another file's line."""
        if not self.offset:
            return True
        f.seek(self.offset - len(self.last))
        return f.read(len(self.last)) == self.last

    def _id_of(self, raw: bytes) -> str | None:
        raise NotImplementedError


class _Recorded(GrowingFile):
    """The run ids the finished lines of a results file carry, as written."""

    def _id_of(self, raw: bytes) -> str | None:
        try:
            record = json.loads(raw)
        except ValueError:  # cut short by a kill, then followed by a line: no run
            return None
        rid = record.get("run_id") if isinstance(record, dict) else None
        return rid if isinstance(rid, str) else None


def _ends_mid_line(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"
