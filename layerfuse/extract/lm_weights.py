"""The backbone's masked-LM weights, read straight from its safetensors files (never a pickle):
the input word embeddings (the tied decoder) and, when the checkpoint ships one, its MLM head.

Names of the result follow the cache's ``lm`` group: ``embeddings`` [vocab, d], and for a head
``dense_weight`` [d, d], ``dense_bias`` [d], ``norm_weight`` [d], ``norm_bias`` [d],
``decoder_bias`` [vocab]. Sentence-embedding checkpoints (all-MiniLM-L6-v2, all-mpnet-base-v2)
ship no head.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import LayerfuseError
from .models import ModelInfo, resolve_model_path

HEAD_KEYS = ("dense_weight", "dense_bias", "norm_weight", "norm_bias", "decoder_bias")
EMBEDDING_SUFFIX = "embeddings.word_embeddings.weight"
# Checkpoint tensor names of each family's head, by our name; alternatives in order of preference.
HEADS = {
    "bert": {
        "dense_weight": ("cls.predictions.transform.dense.weight",),
        "dense_bias": ("cls.predictions.transform.dense.bias",),
        "norm_weight": ("cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.gamma"),
        "norm_bias": ("cls.predictions.transform.LayerNorm.bias", "cls.predictions.transform.LayerNorm.beta"),
        "decoder_bias": ("cls.predictions.bias", "cls.predictions.decoder.bias"),
    },
    "roberta": {  # RoBERTa, XLM-R, MPNet
        "dense_weight": ("lm_head.dense.weight",),
        "dense_bias": ("lm_head.dense.bias",),
        "norm_weight": ("lm_head.layer_norm.weight",),
        "norm_bias": ("lm_head.layer_norm.bias",),
        "decoder_bias": ("lm_head.bias", "lm_head.decoder.bias"),
    },
    "distilbert": {
        "dense_weight": ("vocab_transform.weight",),
        "dense_bias": ("vocab_transform.bias",),
        "norm_weight": ("vocab_layer_norm.weight",),
        "norm_bias": ("vocab_layer_norm.bias",),
        "decoder_bias": ("vocab_projector.bias",),
    },
}


def model_dir(source: str | os.PathLike | ModelInfo | None) -> Path:
    """The local directory of a model given as ModelInfo, directory, name or None (the default),
    resolved as extraction does; a hub name must be in the local HF cache."""
    path = source.path if isinstance(source, ModelInfo) else resolve_model_path(
        None if source is None else os.fspath(source))[1]
    if Path(path).is_dir():
        return Path(path)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path, local_files_only=True))
    except Exception as exc:  # not cached: the HF libraries raise several types
        raise LayerfuseError(f"model {path!r} is not a local directory nor in the local HF cache") from exc


def safetensors_files(directory: Path) -> list[Path]:
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise LayerfuseError(f"{directory}: no .safetensors weights (the MLM weights are read from safetensors only)")
    return files


def _names(files: list[Path]) -> dict[str, Path]:
    from safetensors import safe_open

    names = {}
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            names.update((k, f) for k in handle.keys())
    return names


def _head_names(names) -> dict[str, str] | None:
    """Our name -> checkpoint tensor name of the first family whose head is complete."""
    for family in HEADS.values():
        found = {}
        for ours, candidates in family.items():
            hit = next((c for c in candidates if c in names), None)
            if hit is None:
                break
            found[ours] = hit
        else:
            return found
    return None


def has_lm_head(source) -> bool:
    """Whether the checkpoint ships an MLM head (reads only the files' headers)."""
    return _head_names(_names(safetensors_files(model_dir(source)))) is not None


def lm_head_weights(source, *, embeddings: bool = True) -> dict[str, np.ndarray]:
    """``embeddings`` (unless ``embeddings=False``) plus the head's five arrays when the checkpoint
    has them, float32."""
    from safetensors import safe_open

    directory = model_dir(source)
    names = _names(safetensors_files(directory))
    wanted = dict(_head_names(names) or {})
    if embeddings:
        hits = sorted((k for k in names if k.endswith(EMBEDDING_SUFFIX)), key=len)
        if not hits:
            raise LayerfuseError(f"{directory}: no tensor named *{EMBEDDING_SUFFIX} in the safetensors files")
        wanted["embeddings"] = hits[0]  # the shortest: the backbone's own, not a generator's
    out = {}
    for ours, name in wanted.items():
        with safe_open(str(names[name]), framework="pt") as handle:
            out[ours] = handle.get_tensor(name).float().numpy()
    return out
