"""The head a run record names: `train-head` writes ``<run>.json`` beside ``<run>.head.safetensors``,
and `predict`, `export` and `Predictor` take either; a record names only the head beside it, and that
head must be the one it trained (its hash)."""

from __future__ import annotations

import json
import os

from ..errors import LayerfuseError
from .checkpoint import checkpoint_paths, file_sha256


def as_run_record(path: str) -> str:
    """``path``, or for the stem of a run (RUN, as train-head prints RUN.json) whose RUN.safetensors is
    not there, its run record RUN.json."""
    path = str(path)
    if not path.endswith((".json", ".safetensors")) and not os.path.exists(path + ".safetensors") \
            and os.path.isfile(path + ".json"):
        return path + ".json"
    return path


def resolve_head(path: str) -> tuple[str, dict | None]:
    """(head checkpoint stem, its run record or None) for a checkpoint (stem, ``.safetensors`` or
    ``.json``) or for the run record ``train-head`` writes beside it (``<run>.json``, which names it)."""
    path = str(path)
    if os.path.isdir(path):
        raise LayerfuseError(f"{path} is a folder, not a head: give a head (RUN.head) or its run record (RUN.json), "
                             "or a sweep's folder with --best or --run")
    if path.endswith(".json") and not os.path.exists(path):
        raise LayerfuseError(f"no head at {path}: the file does not exist")
    path = as_run_record(path)
    if path.endswith(".json") and os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
        except json.JSONDecodeError as exc:
            raise LayerfuseError(f"{path} is not valid JSON (line {exc.lineno}): {exc.msg}") from None
        if isinstance(record, dict) and record.get("checkpoint"):  # a run record
            # Its head is the one beside it, whatever path an older record stored: a copied run folder must
            # not export the original's (since retrained) weights under this run's scores.
            weights = checkpoint_paths(os.path.join(os.path.dirname(path), os.path.basename(record["checkpoint"])))[0]
            check_record_head(path, record, weights)
            return weights[: -len(".safetensors")], record
    stem = checkpoint_paths(path)[0][: -len(".safetensors")]
    run = (stem[: -len(".head")] if stem.endswith(".head") else stem) + ".json"
    record = None
    if os.path.isfile(run) and run != checkpoint_paths(stem)[1]:
        try:
            with open(run, encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError):
            record = None  # the card then says less; the model does not depend on it
        if isinstance(record, dict) and record.get("checkpoint"):
            check_record_head(run, record, checkpoint_paths(stem)[0])
    return stem, record


def check_record_head(path: str, record: dict, weights: str) -> None:
    """The head beside run record ``path`` must be the one it trained (its ``head_sha256``; older records
    carry none)."""
    if not os.path.isfile(weights):
        raise LayerfuseError(f"{path} names the head {os.path.basename(weights)}, which is not beside it")
    if record.get("head_sha256") and file_sha256(weights) != record["head_sha256"]:
        raise LayerfuseError(f"{weights} is not the head {path} trained (its weights' sha256 differs from the "
                              "record's): the head was truncated, retrained or replaced since; export the record "
                              "written with it")
