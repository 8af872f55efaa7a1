"""The heads a sweep keeps (`sweep --keep-heads`), so that its winners can leave the tool (`export`).

A cell is one setting of the grid but for its seed: the trials of one fusion, N, epoch cap, rate, ...
``best`` keeps the head of the best run of each cell by its best dev score (F1 or token accuracy,
higher; perplexity, lower; ties: the lower seed, so what is kept never hangs on which run finished first),
``all`` every run's, ``none`` none.

A kept head lies in the sweep's folder as `train-head` writes one: ``heads/<run id>.head.safetensors``
and ``.head.json`` (the checkpoint), and ``heads/<run id>.json``, its run record, which names the head
relatively (``"<id>.head.safetensors"``) and carries its weights' hash: a folder moved or copied whole
still exports. The heads folder is the one account of what is kept. Each run's line in
``results.jsonl`` is written once, when it finishes, and never again: under ``all`` it names its head
(``"checkpoint": "heads/<id>.head.safetensors"``, relative to results.jsonl: that head stays); under
``best`` it names none, since a later run of its cell may still beat it, and says ``"keep_heads":
"best"`` (the head's hash is in the heads folder's record alone: a line never differs by the order runs
finished in). Each run's head is written where it trained (a worker, a Ray task), then kept or deleted here
as the run is recorded: at most one head per cell is on disk under ``best``, plus those in flight.
"""

from __future__ import annotations

import json
import math
import os

from ..display import first_few
from ..errors import LayerfuseError
from ..files import folder_locked, uninterrupted, write_json
from ..tasks import task_of
from .results import (
    RESULTS,
    append_result,
    diverged,
    label_sets_of,
    read_results,
    recorded,
    refuse_mixed_metrics,
    run_id,
    scored_by,
)

KEEP_HEADS = ("none", "best", "all")
SWEEP_KEEPS = "best"  # what `sweep` keeps unless told (scripts' grids, `run_grid`, keep none)
HEADS = "heads"  # the folder of kept heads, beside results.jsonl


def heads_dir(results: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(results)), HEADS)


def head_files(folder: str, rid: str) -> tuple[str, str, str]:
    """(weights, checkpoint JSON, run record) of run ``rid``'s head in the heads ``folder``."""
    stem = os.path.join(folder, rid)
    return stem + ".head.safetensors", stem + ".head.json", stem + ".json"


def save_run_head(result, data, config, *, folder: str) -> None:
    """Write the head of a finished run (``result.tagger``, at its best dev point) as a checkpoint in
    ``folder``, named by its run id; where the run trained, so no weights travel between processes."""
    from ..training.checkpoint import save_checkpoint

    task = task_of(config)
    best = "best_dev_accuracy" if result.best_dev_accuracy is not None else f"best_dev_{task.headline}"
    extra = {best: getattr(result, best), "best_step": result.best_step}
    if not task.is_default:  # NER checkpoints name no task, as train-head writes them
        extra = {"task": task.name, **extra}
    weights, _, _ = head_files(folder, run_id(config))
    with uninterrupted():  # the weights and their description together (`files.uninterrupted`)
        save_checkpoint(weights[: -len(".safetensors")], result.tagger, tagger_kwargs=result.tagger_kwargs,
                        layers=result.layers, label_names=data.label_names, cache_meta=data.meta,
                        cache_path=data.path, config=config.record(), extra=extra)


def cell_of(config: dict) -> str:
    """A cell's name: the run id its seed-0 trial has (every other field of the setting is in it)."""
    return run_id({**config, "seed": 0})


def dev_rank(record: dict) -> float:
    """The record's best dev score as "higher is better"; a run that diverged ranks below every other."""
    if diverged(record):
        return -math.inf
    if record.get("best_dev_accuracy") is not None:
        return record["best_dev_accuracy"]
    if record.get("best_dev_ppl") is not None:
        return -record["best_dev_ppl"]
    f1 = record.get("best_dev_f1")
    return -math.inf if f1 is None or math.isnan(f1) else f1


def keep_rank(record: dict) -> tuple:
    """`dev_rank`, ties broken by the lower seed: which head of a cell stays, whatever order its runs finish in."""
    return dev_rank(record), -int(record["config"].get("seed") or 0)


def record_run(results: str, record: dict, *, keep: str) -> dict:
    """Append ``record`` to ``results`` once, after keeping or deleting the head its run wrote under
    ``keep`` (see the module's doc). Returns the record as appended."""
    folder = heads_dir(results)
    rid = record["run_id"]
    if keep == "none":  # the record as it always was: no checkpoint
        append_result(results, record)
        return record
    with folder_locked(folder):  # one sweep at a time decides what a folder keeps (sweeps may share an --out)
        if recorded(results, rid):  # run twice (its first owner stalled past its claim): recorded once, as it was
            if not os.path.exists(head_files(folder, rid)[2]):
                _delete(folder, rid)  # the head it wrote is kept by no record
            return read_results(results).get(rid, record)  # the line as it was written, where it reads back
        rivals = _kept_rivals(folder, record) if keep == "best" else []
        rival = max(rivals, key=keep_rank, default=None)
        # a diverged run keeps no head, as train-head saves none: export would ship a broken one
        if diverged(record) or rival is not None and keep_rank(record) <= keep_rank(rival):  # the kept one stays
            _delete(folder, rid)
            record = {**record, "keep_heads": keep, "checkpoint": None}  # as a kept run's line orders them
            append_result(results, record)
            return record
        from ..training.checkpoint import file_sha256

        weights, _, run_record = head_files(folder, rid)
        record = {**record, "head_sha256": file_sha256(weights), "keep_heads": keep}  # export checks the hash
        write_json(run_record, {**record, "checkpoint": os.path.basename(weights)})  # beside the head, as train-head
        _SEEN.setdefault(os.path.abspath(folder), {})[os.path.basename(run_record)] = cell_of(record["config"])
        for beaten in rivals:  # heads kept under best only: one a sweep kept under all is never deleted
            if beaten.get("keep_heads", "all") == "best":
                _delete(folder, beaten["run_id"])
        # only a head that stays is named here: under best a later run of the cell may replace it
        here = os.path.relpath(weights, os.path.dirname(os.path.abspath(results))) if keep == "all" else None
        record = {**record, "checkpoint": here}
        if keep == "best":
            del record["head_sha256"]
        append_result(results, record)
        return record


def kept_heads(folder: str) -> dict[str, dict]:
    """The run records of the heads kept in a heads ``folder``, by run id."""
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return {name[:-5]: _kept_record(folder, name) for name in sorted(names) if _is_record(name)}


def _is_record(name: str) -> bool:
    """Whether the file ``name`` of a heads folder is a kept head's run record (not its checkpoint's JSON)."""
    return name.endswith(".json") and not name.endswith(".head.json")


def _kept_record(folder: str, name: str) -> dict:
    """The kept head's run record ``name`` in ``folder``, checked to name its own run and a head beside it."""
    path = os.path.join(folder, name)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        rid, checkpoint = record["run_id"], record.get("checkpoint")
    except (ValueError, KeyError, TypeError):  # damaged by hand or by a tool: say which, not a traceback
        raise LayerfuseError(f"{path} is not a kept head's run record (cut short or edited): remove it "
                             f"and its head files ({name[:-5]}.head.*), then rerun") from None
    # A record names its own file's run and a head beside it: the ids and names become paths (a
    # sweep deletes beaten heads, export reads the best), so "../../x" reached files anywhere.
    if rid != name[:-5] or (checkpoint is not None and (not isinstance(checkpoint, str)
                                                         or os.path.basename(checkpoint) != checkpoint)):
        raise LayerfuseError(f"{path} names run {rid!r} and head {checkpoint!r}, not its own run and a file "
                             "beside it: it was edited; remove it, then rerun")
    return record


# Heads folder -> {each file name this process saw there: the cell of a kept head's run record, None for any
# other file}. A record's run id names its cell, so a sweep reads each record once to place it, and then only
# its own cell's (the rivals of each run): reading every record for every run made a sweep of many cells
# quadratic in its runs.
_SEEN: dict[str, dict[str, str | None]] = {}


def _kept_rivals(folder: str, record: dict) -> list[dict]:
    """The kept heads of ``record``'s cell (on the same entry): one under best, several where a sweep kept all.
    The folder is listed each time, so what another sweep sharing it kept or deleted is seen."""
    cell, seen = cell_of(record["config"]), _SEEN.setdefault(os.path.abspath(folder), {})
    names = set(os.listdir(folder)) if os.path.isdir(folder) else set()
    for name in seen.keys() - names:  # deleted since: by this sweep, another one, or by hand
        del seen[name]
    for name in sorted(names - seen.keys()):  # new since: read once, to place it
        seen[name] = cell_of(_kept_record(folder, name)["config"]) if _is_record(name) else None
    ours = sorted(name for name, where in seen.items() if where == cell and name[:-5] != record["run_id"])
    rivals = [_kept_record(folder, name) for name in ours]  # read again, as they are now
    return [r for r in rivals if r.get("cache_key") == record.get("cache_key") and cell_of(r["config"]) == cell]


def _delete(folder: str, rid: str) -> None:
    for path in head_files(folder, rid):
        if os.path.exists(path):
            os.remove(path)


def sweep_head(folder: str, *, run: str | None = None, best: bool = False, log=None) -> str:
    """The run record of a head a sweep kept in ``folder`` (its --out), for `export`: run ``run``'s;
    with ``best``, the best kept run of ``run``'s cell, or without ``run`` the best kept run of the sweep.
    ``log`` is told when a run that kept no head scored better (run before heads were kept, or under
    --keep-heads none): the head exported is then the best kept, not the best run."""
    results = os.path.join(folder, RESULTS)
    if not os.path.isfile(results):
        raise LayerfuseError(f"{folder} holds no {RESULTS}: not the --out folder of a sweep")
    records = read_results(results)
    heads = os.path.join(folder, HEADS)
    kept = kept_heads(heads)
    if run is None and not best:
        raise LayerfuseError(f"{folder} is a sweep's folder: name one of its runs with --run RUN_ID, or --best")
    if run is not None and run not in records:
        raise LayerfuseError(f"no run {run!r} in {results}" + _listed(kept))
    cell = cell_of(records[run]["config"]) if run is not None else None
    in_cell = [r for r in kept.values() if cell is None or cell_of(r["config"]) == cell]
    if best:
        if not in_cell:
            where = f"run {run}'s cell" if run is not None else folder
            raise LayerfuseError(f"no head kept for {where}: the sweep ran under --keep-heads none, or before heads "
                                 "were kept; train-head with a run's settings and seed (its record's config) trains "
                                 "its head again")
        refuse_mixed_metrics(in_cell, results)  # an accuracy is no better or worse than an F1
        sets = sorted(set(label_sets_of(in_cell).values()))
        if len(sets) > 1:  # nor is an F1 over chunks than one over entities: each its own model
            raise LayerfuseError(f"{folder} kept heads of the label sets {', '.join(sets)}: --best compares one; "
                                 f"name a run of the set you want with --best --run RUN_ID")
        devs = sorted({r["config"].get("dev_sentences") or 0 for r in in_cell})
        if len(devs) > 1:  # an F1 on 3 dev sentences beat one on all of dev, and the card did not say so
            shown = ", ".join(f"{n} sentences" if n else "all of dev" for n in devs)
            raise LayerfuseError(f"{folder} kept heads scored on different dev sets ({shown}): --best compares "
                                 "scores on one; name a run scored on the one you want with --best --run RUN_ID")
        record = max(in_cell, key=keep_rank)
        if diverged(record):  # kept by an earlier release, which kept the heads of diverged runs
            where = f"run {run}'s cell" if run is not None else folder
            raise LayerfuseError(f"every head kept for {where} is of a "
                                 "run that diverged (its training or dev loss went nan or inf): none is worth "
                                 "exporting; rerun its settings at a lower learning rate")
        named = label_sets_of([*records.values(), record])
        scope = [r for r in records.values() if (cell is None or cell_of(r["config"]) == cell)
                 and scored_by(r) == scored_by(record) and named[r["run_id"]] == named[record["run_id"]]]
        top = max(scope, key=dev_rank)
        if log is not None and dev_rank(top) > dev_rank(record) and top["run_id"] not in kept:
            log(f"note: run {top['run_id']} scored better on dev but kept no head (it ran before heads were kept, "
                f"or under --keep-heads none); exporting the best kept head, run {record['run_id']}")
    elif run in kept:
        record = kept[run]
    else:
        kept_best = max(in_cell, key=keep_rank) if in_cell else None
        if diverged(records[run]):
            why = "it diverged (its training or dev loss went nan or inf), and a diverged run keeps no head" + (
                f"; the best kept head of its cell is run {kept_best['run_id']} (--best)" if kept_best else "")
        elif kept_best is not None and dev_rank(kept_best) >= dev_rank(records[run]):
            how = "better" if dev_rank(kept_best) > dev_rank(records[run]) else "as well, with a lower seed,"
            why = (f"run {kept_best['run_id']} of its cell scored {how} on dev (export it: --run "
                   f"{kept_best['run_id']}, or --best)")
        else:  # the best of its cell, or no head kept there: it ran before heads were kept, or under none
            why = "it ran under --keep-heads none, or before heads were kept" + (
                f"; the best kept head of its cell is run {kept_best['run_id']} (--best)" if kept_best else "")
        raise LayerfuseError(f"run {run} in {folder} kept no head: {why}")
    beside = head_files(heads, record["run_id"])[2]
    if not os.path.isfile(os.path.join(heads, record["checkpoint"])):
        raise LayerfuseError(f"run {record['run_id']}'s head {os.path.join(heads, record['checkpoint'])} is missing")
    return beside


def _listed(kept: dict) -> str:
    ids = sorted(kept)
    if not ids:
        return " (it kept no heads)"
    return f"; runs with a kept head: {first_few(ids, sep=', ')}"
