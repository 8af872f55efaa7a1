"""Head checkpoints: safetensors weights plus a JSON config, never a pickle.

``<stem>.safetensors`` holds the state dict (DWAtt's fixed ``k_pos`` included, so the head is
reproduced exactly); ``<stem>.json`` holds what rebuilds and explains it: the TokenTagger
arguments, the fused layer ids, the label names, the run config and the cache it was trained on.
Opening someone else's checkpoint therefore runs none of their code.

An MLM head (``"task": "mlm"``, a `FusedMaskedLM`) saves its fusion, transform and decoder bias,
not the tied embeddings: whoever loads it ties the decoder to the backbone it runs with
(``head.lm.tie(...)``), which for an FT head is the fine-tuned backbone saved beside it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import is_dataclass

from layerfuse.errors import LayerfuseError, OptionError
from layerfuse.files import replaced_whole, write_json, writing
from layerfuse.tasks import task_of

FORMAT = "layerfuse-head"
FORMERLY = ("layercache-head",)  # the format's name before the package's rename: the same heads, read alike
FORMAT_VERSION = 3  # 2: the tagger records every fusion's own settings (version 1 heads lack one); 3: MLM heads
# Each task writes its own `Task.checkpoint_version`: NER heads still say 2 (nothing in them changed), so
# older readers keep reading them; MLM heads say 3, which older readers refuse by name instead of failing
# on the unknown arguments.
CACHE_FIELDS = ("key", "model", "model_path", "model_revision", "model_type", "hidden_size", "num_layers", "num_heads",
                "ffn_dim", "dataset", "dataset_source", "dataset_fingerprint", "granularity", "pooling", "dtype",
                "max_length")
CHECKSUM = "weights_sha256"  # the head JSON's hash of its weights file (heads written before it carry none)
DESCRIPTION = ("tagger", "layers", "label_names")  # what the weights mean: edited, a head tags wrong in silence
DESCRIPTION_CHECKSUM = "description_sha256"  # their hash (heads written before it carry none)
# What decides the states predict and export feed the head, and how its tags are read: edited, the head was
# fed another model's, pooling's or length's states in silence. No paths: a run folder or a backbone moves,
# and the revision and `backbone_sha256` check the content wherever it is.
INPUT_CACHE_FIELDS = ("model", "model_revision", "model_type", "hidden_size", "num_layers", "granularity", "pooling",
                      "max_length", "special_tokens", "label_set", "label_kind")
INPUTS_CHECKSUM = "inputs_sha256"  # their hash, with the task, mode and tuned backbone's (heads before it: none)


def description_sha256(record: dict) -> str:
    """The hash of a head record's `DESCRIPTION` fields, as JSON with sorted keys."""
    return hashlib.sha256(json.dumps({k: record.get(k) for k in DESCRIPTION}, sort_keys=True).encode()).hexdigest()


def inputs_sha256(record: dict) -> str:
    """The hash of what decides a head record's inputs (`INPUT_CACHE_FIELDS`, its task, its run's mode and its
    tuned backbone's content hash), as JSON with sorted keys."""
    cache, config = record.get("cache") or {}, record.get("config") or {}
    inputs = {"cache": {k: cache.get(k) for k in INPUT_CACHE_FIELDS}, "task": record.get("task"),
              "mode": config.get("mode"), "backbone_sha256": record.get("backbone_sha256")}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_sha256(folder: str) -> str:
    """One sha256 over the weight files of a saved model ``folder`` (an FT head's tuned backbone), by name."""
    digest = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        if name.endswith((".safetensors", ".bin")):
            digest.update(name.encode() + file_sha256(os.path.join(folder, name)).encode())
    return digest.hexdigest()


def checkpoint_paths(path: str) -> tuple[str, str]:
    """(weights, config) for a stem or either file of the pair."""
    path = str(path)
    for ext in (".safetensors", ".json"):
        if path.endswith(ext):
            path = path[: -len(ext)]
    return path + ".safetensors", path + ".json"


def save_checkpoint(path: str, tagger, *, tagger_kwargs: dict, layers, label_names, cache_meta: dict,
                    cache_path: str | None = None, config=None, extra: dict | None = None) -> tuple[str, str]:
    """Write ``<stem>.safetensors`` and ``<stem>.json``; returns both paths."""
    from safetensors.torch import save_model

    from ..versions import versions

    weights, config_path = checkpoint_paths(path)
    os.makedirs(os.path.dirname(weights) or ".", exist_ok=True)
    record = {
        "format": FORMAT,
        "format_version": task_of(extra or {}).checkpoint_version,
        "tagger": dict(tagger_kwargs),
        "layers": [int(x) for x in layers],
        "label_names": list(label_names),
        "config": config.record() if is_dataclass(config) else config,
        "cache": {**{k: cache_meta.get(k) for k in CACHE_FIELDS},
                  **({"special_tokens": True} if cache_meta.get("special_tokens") else {}),
                  # a head of another label set than NER (POS, chunk): which one, and how it is scored
                  **({k: cache_meta[k] for k in ("label_set", "label_kind")} if cache_meta.get("label_set")
                     not in (None, "ner") else {}),
                  # a set beside the primary one: its own labels' fingerprints (the dataset's covers the primary's)
                  **({"label_fingerprints": cache_meta["label_fingerprints"]} if cache_meta.get("label_fingerprints")
                     else {}),
                  "path": cache_path},
        "versions": versions(),
        **(extra or {}),
    }
    module = copy.deepcopy(tagger).cpu() if _on_gpu(tagger) else tagger
    with writing(weights):  # a full disk is an OSError naming the file, not safetensors' own error type
        replaced_whole(weights, lambda tmp: save_model(module, tmp, metadata={"format": FORMAT}))
    record[CHECKSUM] = file_sha256(weights)  # what load_checkpoint and a run record compare the weights with
    record[DESCRIPTION_CHECKSUM] = description_sha256(record)
    record[INPUTS_CHECKSUM] = inputs_sha256(record)
    write_json(config_path, record)
    same_mode(weights, like=config_path)
    return weights, config_path


def same_mode(path: str, *, like: str) -> None:
    """Give ``path`` the permission bits of ``like``, a file this process wrote with ``open`` (so the
    user's umask: 0644 under the usual 022). safetensors writes its files 0600, which others sharing
    a run folder, or a Hub upload, could not read; copying a sibling's mode reads no process-wide umask."""
    os.chmod(path, os.stat(like).st_mode & 0o777)


def read_checkpoint_meta(path: str) -> dict:
    """A checkpoint's JSON metadata, checked (its weights file must exist too); no weights are read."""
    weights, config_path = checkpoint_paths(path)
    for f in (weights, config_path):
        if not os.path.isfile(f):
            raise LayerfuseError(f"checkpoint file {f} does not exist")
    try:
        with open(config_path, encoding="utf-8") as f:
            meta = json.load(f)
    except json.JSONDecodeError as exc:
        raise LayerfuseError(f"{config_path} is not valid JSON (line {exc.lineno}, column {exc.colno}): "
                             f"{exc.msg}") from None
    if meta.get("format") not in (FORMAT, *FORMERLY):
        raise LayerfuseError(f"{config_path} is not a layerfuse head checkpoint (format {meta.get('format')!r})")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise LayerfuseError(f"{config_path} has format version {meta['format_version']}; this layerfuse "
                              f"reads up to {FORMAT_VERSION}")
    _check_description(meta, config_path)
    return meta


def _check_description(meta: dict, config_path: str) -> None:
    """The label names and layers must be those the weights were trained with: a label list of another
    length failed deep in tagging (or exported a model that cannot run), two names swapped tagged B-PER
    as B-LOC, other layers fed the head other inputs; all in silence. So must what decides its inputs."""
    tagger, names = meta.get("tagger") or {}, meta.get("label_names")
    if "n_labels" in tagger and isinstance(names, list) and len(names) != tagger["n_labels"]:
        raise LayerfuseError(f"{config_path}: {len(names)} label names for a head of {tagger['n_labels']} labels")
    if meta.get(DESCRIPTION_CHECKSUM) and description_sha256(meta) != meta[DESCRIPTION_CHECKSUM]:
        raise LayerfuseError(f"{config_path}: its tagger, layers or label names changed since the head was written "
                              "(they no longer match its checksum); retrain the head or restore the file")
    if meta.get(INPUTS_CHECKSUM) and inputs_sha256(meta) != meta[INPUTS_CHECKSUM]:
        raise LayerfuseError(f"{config_path}: what decides its inputs (the cache's model, revision, granularity, "
                              "pooling, max length or special tokens, its task, mode or tuned backbone) changed "
                              "since the head was written (they no longer match its checksum); retrain the head "
                              "or restore the file")


def load_checkpoint(path: str, *, entry=None, device: str = "cpu"):
    """(TokenTagger in eval mode, metadata dict); an MLM checkpoint gives a `FusedMaskedLM` whose
    decoder is still to be tied. With a `CacheEntry`, a checkpoint trained on a backbone of another
    width or depth is refused, naming both."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    from .tasks import head_class

    weights, config_path = checkpoint_paths(path)
    meta = read_checkpoint_meta(path)
    if entry is not None:
        check_compatible(meta, entry)
    legacy_options(meta["tagger"])
    if meta.get(CHECKSUM) and file_sha256(weights) != meta[CHECKSUM]:
        raise LayerfuseError(f"{weights} does not match the checksum in {config_path} (truncated or changed since "
                              "it was written); retrain the head or restore the file")
    try:
        _check_shapes(head_class(meta), meta["tagger"], weights, config_path)
        tagger = head_class(meta)(**meta["tagger"])
    except OptionError as exc:  # a value of the head's file, not of the command line: no usage error
        raise LayerfuseError(f"{config_path}: {exc}") from None
    try:
        load_model(tagger, weights, strict=True, device=str(device))
    except (RuntimeError, KeyError, ValueError, SafetensorError) as exc:  # a truncated file is a SafetensorError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise LayerfuseError(f"weights in {weights} do not fit the head described in {config_path}: {first}") from None
    bad = non_finite_weights(tagger)
    if bad:  # a checksum proves the bytes are the ones written, not that they are numbers
        raise LayerfuseError(f"{weights} holds non-finite weights (nan or inf) in {', '.join(bad[:3])}"
                              f"{' and more' if len(bad) > 3 else ''}; the head cannot tag anything")
    return tagger.to(device).eval(), meta


def _check_shapes(head, kwargs: dict, weights: str, config_path: str) -> None:
    """The head the description builds, on the meta device (no memory), against the tensors the weights
    file holds, before anything is allocated: an edited description sized a head of hundreds of GB where
    the file holds megabytes. Keys present on one side only are left to ``load_model``'s strict load."""
    import torch

    stored = _stored_shapes(weights)
    if stored is None:
        return
    with torch.device("meta"):
        built = {name: tuple(t.shape) for name, t in head(**kwargs).state_dict().items()}
    differ = [name for name in built if name in stored and built[name] != stored[name]]
    if differ:
        raise LayerfuseError(f"weights in {weights} do not fit the head described in {config_path}: "
                             + ", ".join(f"{n} is {list(stored[n])}, not {list(built[n])}" for n in differ[:2]))


def _stored_shapes(weights: str) -> dict[str, tuple[int, ...]] | None:
    """Each tensor's shape from a safetensors file's header (no tensor read); None when the header cannot
    be read (``load_model`` then names the damage)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(weights, framework="pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError, ValueError):
        return None


def non_finite_weights(tagger) -> list[str]:
    """The names of ``tagger``'s floating-point tensors holding nan or inf (a diverged training's head)."""
    return [name for name, t in tagger.state_dict().items() if t.is_floating_point() and not t.isfinite().all()]


def legacy_options(tagger: dict) -> None:
    """Fill in, in a checkpoint's ``tagger`` record, each of its fusion's own settings that it lacks
    with the value that ran before the setting existed (`Option.before`)."""
    from ..fusions.registry import FUSIONS

    for option in getattr(FUSIONS.get(tagger.get("fusion")), "options", ()):
        tagger.setdefault(option.name, option.legacy)


def check_compatible(meta: dict, entry) -> None:
    """The checkpoint's backbone width and layer count must be the cache entry's."""
    cache = meta.get("cache", {})
    for name, ours, theirs in (("hidden size", cache.get("hidden_size"), entry.dim),
                               ("layer count", cache.get("num_layers"), entry.num_layers)):
        if ours is None or int(ours) != int(theirs):
            raise LayerfuseError(
                f"checkpoint {name} {ours} does not match the cache entry's {theirs} ({entry.path}); "
                f"the head was trained on {cache.get('model')!r}, the cache holds {entry.meta.get('model')!r}"
            )
    bad = [x for x in meta.get("layers", []) if not 0 <= int(x) <= entry.num_layers]
    if bad:
        raise LayerfuseError(f"checkpoint fuses layers {bad}, outside the cache's 0..{entry.num_layers}")


def _on_gpu(module) -> bool:
    return any(p.device.type != "cpu" for p in module.state_dict().values())
