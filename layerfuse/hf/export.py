"""`export_head`: a head checkpoint plus its backbone written as one transformers model folder
(``config.json``, ``model.safetensors``, the tokenizer, a model card ``README.md``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile

from ..errors import LayerfuseError
from ..files import writing
from ..tasks import task_of
from ..training.run_record import resolve_head
from .card import LICENSE_FIELDS, backbone_license, hub_dataset_id, hub_model_id, language_of, model_card


def word_start_table(tokenizer, vocab_size: int):
    """[vocab_size] bool: whether each token id begins a word, from the tokenizer's subword marks
    (WordPiece's ``##`` continues a word; byte-level BPE's ``Ġ`` and SentencePiece's ``▁`` begin one).
    A vocabulary with no such marks: every token is a word of its own."""
    import torch

    n = min(len(tokenizer), vocab_size)
    tokens = [str(t) for t in tokenizer.convert_ids_to_tokens(list(range(n)))]
    backend = getattr(getattr(tokenizer, "backend_tokenizer", None), "model", None)
    prefix = getattr(backend, "continuing_subword_prefix", None)
    table = torch.ones(vocab_size, dtype=torch.bool)
    if prefix:
        starts = [not t.startswith(prefix) for t in tokens]
    else:
        marks = [m for m in ("Ġ", "▁") if any(t.startswith(m) for t in tokens)]
        starts = [t.startswith(marks[0]) for t in tokens] if marks else [True] * n
    table[:n] = torch.tensor(starts, dtype=torch.bool)
    return table


def export_head(head: str, out: str, *, device: str | None = None, model: str | None = None) -> str:
    """Write ``head`` (a checkpoint or its run record) with its backbone as a transformers model in
    ``out``: loadable by `AutoModelForTokenClassification.from_pretrained` and usable in
    ``pipeline("token-classification")`` once layerfuse is imported. Returns ``out``.

    The model tags what `predict` tags: the same backbone weights, layers, pooling and head, its
    logits at a word's first token the head's for that word (`layerfuse.hf.modeling`). ``model``: the
    backbone's folder where it has moved since the head was trained (checked against its revision)."""
    import transformers

    from ..extract.models import quiet_transformers, resolve_model_path
    from ..inference.predictor import load_head
    from ..training.checkpoint import same_mode
    from .support import REQUIREMENT, supported

    if not supported(transformers.__version__):
        raise LayerfuseError(f"export needs {REQUIREMENT} (installed: {transformers.__version__}): "
                              f"pip install -U '{REQUIREMENT}'")
    from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

    from .modeling import LayerfuseForTokenClassification, LayerfuseTaggerConfig

    stem, record = resolve_head(head)
    tagger, meta, backbone, _ = load_head(stem, device=device or "cpu", model=model)
    task = task_of(meta)
    if not task.labels_from_data:
        raise LayerfuseError(f"{stem} is an {meta['task'].upper()} head; only taggers export as token "
                              f"classification models")
    if model:  # the backbone read from where it has moved: its name and license are that folder's
        name, path = resolve_model_path(model)
        meta = {**meta, "cache": {**meta.get("cache", {}), "model": name, "model_path": path}}
    provenance = {**_provenance(meta, record), **_license(meta)}
    _refuse_to_replace(out, provenance)
    labels = list(meta["label_names"])
    model_config = backbone.model.config
    config = LayerfuseTaggerConfig(
        backbone={k: v for k, v in model_config.to_dict().items() if k != "_name_or_path"},  # a local path
        tagger=dict(meta["tagger"]),
        layers=[int(x) for x in meta["layers"]],
        granularity=backbone.granularity,
        pooling=backbone.pooling,
        # the unknown token stands for a word (an emoji, say) that predict tags: it is no special token here
        special_ids=sorted(int(i) for i in backbone.tokenizer.all_special_ids
                           if i != backbone.tokenizer.unk_token_id),
        max_length=int(backbone.encoder.max_length),
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
        layerfuse=provenance,
    )
    config.architectures = [LayerfuseForTokenClassification.__name__]
    model = LayerfuseForTokenClassification(config).eval()
    model.backbone.load_state_dict(backbone.model.cpu().state_dict())
    model.tagger.load_state_dict(tagger.cpu().state_dict())
    model.word_start.copy_(word_start_table(backbone.tokenizer, model.word_start.numel()))
    # Written into a hidden folder inside --out, then moved up file by file: a full disk leaves --out as it
    # was (and no --out at all if this made it), not a model folder with a config and no weights.
    made = not os.path.isdir(out)
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".export-", dir=out)
    try:
        with writing(os.path.join(out, "model.safetensors")), quiet_transformers():
            model.save_pretrained(work)
        tokenizer = backbone.tokenizer
        # The model windows long inputs itself (config.max_length), as predict does: a pipeline that cut them
        # at the backbone's positions would drop words, so the saved tokenizer sets no limit.
        tokenizer.model_max_length = VERY_LARGE_INTEGER
        with writing(os.path.join(out, "tokenizer.json")):  # tokenizers' full disk is a bare Exception
            _save_tokenizer(tokenizer, work)
        card = os.path.join(work, "README.md")
        try:
            with open(card, "w", encoding="utf-8") as f:
                f.write(model_card(config, name=os.path.basename(os.path.normpath(out))))
        except OSError as exc:  # a write's error names no file
            raise OSError(exc.errno, exc.strerror, exc.filename or card) from None
        files = sorted(os.listdir(work))
        for file in files:  # safetensors writes 0600: every file as readable as the card (the umask)
            same_mode(os.path.join(work, file), like=card)
        for file in files:
            os.replace(os.path.join(work, file), os.path.join(out, file))
    except BaseException as exc:
        shutil.rmtree(work, ignore_errors=True)
        if made:
            shutil.rmtree(out, ignore_errors=True)
        if isinstance(exc, OSError) and str(exc.filename or "").startswith(work):  # the file meant, not the
            raise OSError(exc.errno, exc.strerror, out + str(exc.filename)[len(work):]) from None  # work folder's
        raise
    shutil.rmtree(work, ignore_errors=True)
    return out


def _save_tokenizer(tokenizer, out: str) -> None:
    """The backbone's tokenizer, splitting raw text into `predict`'s words first (`split_words_first`), saved
    as transformers' generic fast tokenizer: the backbone's own class would rebuild its pre-tokenizer
    on load. Its inputs stay the backbone's (no ``token_type_ids`` for a model that takes none)."""
    from ..inference.words import split_words_first

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise LayerfuseError(f"export needs a fast (tokenizers) tokenizer; {type(tokenizer).__name__} is not one")
    inputs = list(tokenizer.model_input_names)
    split_words_first(backend)
    tokenizer.save_pretrained(out)
    path = os.path.join(out, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    # a word spelled like a special token ("[SEP]") is text to the pipeline too, as to `predict` (AS_TEXT)
    config.update(tokenizer_class="PreTrainedTokenizerFast", model_input_names=inputs, split_special_tokens=True)
    for loaded_with in ("local_files_only", "is_local"):  # how this machine loaded it, not the model's
        config.pop(loaded_with, None)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)


def _refuse_to_replace(out: str, provenance: dict) -> None:
    """``out`` is written only when it is new, empty, or this same head's export (a rerun): a user's
    files, or another head's model, are never replaced."""
    if os.path.isfile(out):
        raise LayerfuseError(f"--out {out} is a file; name a new folder")
    if not os.path.isdir(out) or not os.listdir(out):
        return
    try:
        with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
            before = json.load(f).get("layerfuse")
    except (OSError, ValueError, AttributeError):
        before = None
    if _identity(before) != _identity(provenance):
        what = "another head's exported model" if isinstance(before, dict) else "files that are not this head's export"
        raise LayerfuseError(f"--out {out} holds {what}; name a new folder, or remove it first")


def _identity(provenance) -> dict | None:
    """What names an export's head: its provenance less what is read about the backbone (its license, which
    an earlier release did not record and a backbone's card may state later)."""
    if not isinstance(provenance, dict):
        return None
    return {k: v for k, v in provenance.items() if k not in LICENSE_FIELDS}


def _license(meta: dict) -> dict:
    """The license the original backbone's model card states: the exported weights are its, fine-tuned or
    not (an FT head's tuned copy beside it has no card)."""
    from ..extract.models import model_source, resolve_model_path

    try:
        path = resolve_model_path(model_source(meta.get("cache", {})))[1]
    except LayerfuseError:  # not installed here: nothing to read
        return {}
    return backbone_license(path)


def _provenance(meta: dict, record: dict | None) -> dict:
    """What the card and a reader need to know where the model came from (no local paths)."""
    cache = meta.get("cache", {})
    run = meta.get("config") or (record or {}).get("config") or {}
    out = {
        "backbone": _public_name(cache.get("model")), "backbone_revision": cache.get("model_revision"),
        "base_model": hub_model_id(cache.get("model"), cache.get("model_revision")),
        "dataset": _public_name(cache.get("dataset")), "dataset_fingerprint": cache.get("dataset_fingerprint"),
        "datasets": hub_dataset_id(cache.get("dataset"), cache.get("dataset_source")),
        "language": language_of(cache.get("dataset"), cache.get("dataset_source")),
        "cache_key": cache.get("key"), "fusion": run.get("fusion"), "shots": run.get("shots"),
        "epochs": run.get("epochs"), "seed": run.get("seed"), "mode": run.get("mode", "fe"),
        "dev_sentences": run.get("dev_sentences"),  # a subset of dev: the card's dev score says so
        "label_set": cache.get("label_set"), "label_kind": cache.get("label_kind"),  # None for NER
        "labels_fingerprint": _labels_fingerprint(cache.get("label_fingerprints")),
    }
    for name in ("best_dev_f1", "test_f1_at_best", "best_dev_accuracy", "test_accuracy_at_best"):
        value = (record or {}).get(name, meta.get(name))
        if value is not None:
            out[name] = value
    return {k: v for k, v in out.items() if v is not None}


def _labels_fingerprint(per_split) -> str | None:
    """One sha256 of a label set's per-split fingerprints (a set beside the entry's primary one, which the
    dataset fingerprint does not cover), or None where the head records none."""
    if not isinstance(per_split, dict) or not per_split:
        return None
    return hashlib.sha256(json.dumps(per_split, sort_keys=True).encode()).hexdigest()


def _public_name(name: str | None) -> str | None:
    """A hub name as it is; a local folder by its last component (the card travels, the path does not)."""
    if name and (os.path.isabs(name) or os.path.exists(name) or name.startswith(".")):
        return os.path.basename(os.path.normpath(name))
    return name
