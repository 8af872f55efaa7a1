"""Shared fixtures: tiny random BERT and RoBERTa encoders built from a config, a small synthetic
CoNLL-style dataset, and an extracted cache of it. Nothing touches the network."""

from __future__ import annotations

import os
import random
import re
import string
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "LAYERFUSE_HOME" not in os.environ:  # what tests write by default (precision.json, caches) stays out of ~
    import atexit
    import shutil
    import tempfile

    os.environ["LAYERFUSE_HOME"] = tempfile.mkdtemp(prefix="layerfuse-tests-")
    atexit.register(shutil.rmtree, os.environ["LAYERFUSE_HOME"], ignore_errors=True)  # one folder a run, gone after

SHARED_CONLL = Path(__file__).resolve().parents[2] / "shared" / "data" / "conll2003"

PEOPLE = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
PLACES = ["paris", "london", "berlin", "madrid", "rome", "vienna", "oslo"]
ORGS = ["acme", "globex", "initech", "umbrella", "hooli"]
FILLER = ["the", "of", "and", "in", "to", "said", "met", "visited", "from", "with", "today", "a", "big", "new"]


def _sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    words, tags = [], []
    for _ in range(rng.randint(3, 12)):
        r = rng.random()
        if r < 0.15:
            words.append(rng.choice(PEOPLE).title())
            tags.append("B-PER")
            if rng.random() < 0.3:
                words.append(rng.choice(PEOPLE).title() + "son")
                tags.append("I-PER")
        elif r < 0.27:
            words.append(rng.choice(PLACES).title())
            tags.append("B-LOC")
        elif r < 0.35:
            words.append(rng.choice(ORGS).title())
            tags.append("B-ORG")
            if rng.random() < 0.4:
                words.append("Inc")
                tags.append("I-ORG")
        else:
            words.append(rng.choice(FILLER))
            tags.append("O")
    return words, tags


def slow_extract_child(options: str = "") -> str:
    """A `python -c` script: extract train of argv[2] with model argv[1] into root argv[3], the writer
    pausing argv[4] seconds after each unit so a test can kill it between units; ``options``: more
    ExtractConfig keywords (``', dtype="int8"'``)."""
    return textwrap.dedent(
        f"""
        import sys, time
        from layerfuse.cache import writer
        original = writer.SplitWriter.write_unit
        def slow(self, unit, rows):
            original(self, unit, rows)
            time.sleep(float(sys.argv[4]))
        writer.SplitWriter.write_unit = slow
        from layerfuse.extract.run import ExtractConfig, extract
        extract(ExtractConfig(model=sys.argv[1], dataset=sys.argv[2], cache_dir=sys.argv[3], unit_rows=256,
                              splits=("train",){options}), progress=False)
        """
    )


def kill_mid_extraction(child, path: str, *, after_units: int, n_units: int = 5) -> None:
    """Wait (at most 2 min) until the extraction process ``child`` has flagged ``after_units`` units of
    train at ``path``, SIGKILL it, and check the kill landed mid-way: some units done but fewer than
    ``n_units``, and the entry refused as incomplete."""
    import signal
    import time

    from layerfuse.cache.reader import open_entry
    from layerfuse.errors import IncompleteEntryError

    deadline = time.time() + 120
    while units_done(path) < after_units and child.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert 0 < units_done(path) < n_units, "the child finished or never started; the kill proved nothing"
    with pytest.raises(IncompleteEntryError):
        open_entry(path).split("train")


def scaled_bert(src, dst, scale):
    """The tiny BERT at ``src`` with ``scale`` applied to its last layer (in place), saved to ``dst``:
    a model whose hidden values go as large as a test needs."""
    import shutil

    import torch
    from transformers import BertModel

    shutil.copytree(src, dst)
    model = BertModel.from_pretrained(src)
    with torch.no_grad():
        scale(model.encoder.layer[-1])
    model.save_pretrained(dst)
    return dst


def units_done(path: str, split: str = "train") -> int:
    """Units of ``split`` an extraction has flagged done (0 before the entry exists): how kill tests
    know the child is mid-way."""
    import numpy as np
    import zarr

    try:
        return int(np.sum(zarr.open_group(path, mode="r")[split]["done"][:]))
    except Exception:
        return 0


def split_arrays(path: str, split: str = "train") -> dict:
    """Every array of one split of an entry, read whole: what "bit for bit equal" compares."""
    import zarr

    return {name: arr[:] for name, arr in zarr.open_group(path, mode="r")[split].arrays()}


def kept_figures(monkeypatch) -> dict:
    """Every figure the report saves while the test runs, kept open: {file name: figure}."""
    from matplotlib.figure import Figure

    kept = {}
    real_savefig = Figure.savefig

    def savefig(fig, path, *args, **kwargs):
        kept[re.sub(r"\.\d+\.tmp$", "", str(path).rsplit("/", 1)[-1])] = fig  # saved beside, then renamed
        return real_savefig(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return kept


def write_conll(path: Path, sentences, line=lambda word, tag: f"{word} NN O {tag}") -> None:
    """A CoNLL-style file of ``sentences`` (words, tags); ``line`` writes one word's columns."""
    with path.open("w", encoding="utf-8") as f:
        f.write("-DOCSTART- -X- -X- O\n\n")
        for words, tags in sentences:
            for w, t in zip(words, tags):
                f.write(line(w, t) + "\n")
            f.write("\n")


def make_sentences(n: int, seed: int) -> list[tuple[list[str], list[str]]]:
    rng = random.Random(seed)
    return [_sentence(rng) for _ in range(n)]


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module's tiny heads: they gain nothing from intra-op threads, and
    threads thrash when other work shares the cores (`pytestmark = usefixtures("one_thread")`)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_conll_dir(tmp_path_factory) -> Path:
    """train/dev/test in IOB2; train holds one very long sentence and a zero-width word."""
    d = tmp_path_factory.mktemp("tiny_conll")
    train = make_sentences(120, seed=1)
    long_words, long_tags = [], []
    for words, tags in make_sentences(12, seed=9):
        long_words += words
        long_tags += tags
    train.insert(5, (long_words, long_tags))  # longer than the tiny models' 64 positions
    train.insert(7, (["Alice", "\u200b", "met", "Bob"], ["B-PER", "O", "O", "B-PER"]))
    write_conll(d / "train.txt", train)
    write_conll(d / "dev.txt", make_sentences(40, seed=2))
    write_conll(d / "test.txt", make_sentences(40, seed=3))
    return d


def _bert_vocab() -> list[str]:
    chars = string.ascii_lowercase + string.digits
    return (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(chars + string.punctuation)
            + ["##" + c for c in chars] + sorted(set(FILLER + PEOPLE + PLACES + ORGS + ["inc"])))


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    d = tmp_path_factory.mktemp("tiny_bert")
    vocab = _bert_vocab()
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(str(d / "vocab.txt")).save_pretrained(d)  # transformers 5 reads a vocab path positionally
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory) -> Path:
    import torch
    from tokenizers import ByteLevelBPETokenizer, processors
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizer

    d = tmp_path_factory.mktemp("tiny_roberta")
    corpus = [" ".join(w for w, _ in [(x, 0) for x in s[0]]) for s in make_sentences(200, seed=4)]
    bpe = ByteLevelBPETokenizer(add_prefix_space=True)
    bpe.train_from_iterator(corpus, vocab_size=320, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe._tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=True)
    bpe.save(str(d / "tokenizer.json"))
    tok = RobertaTokenizer(tokenizer_file=str(d / "tokenizer.json"), add_prefix_space=True)
    tok.save_pretrained(d)
    config = RobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=34, pad_token_id=1)
    torch.manual_seed(0)
    RobertaModel(config).save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory, tiny_bert_dir, tiny_conll_dir) -> str:
    """An extracted entry (train/dev/test) of the tiny BERT over the tiny dataset."""
    from layerfuse.extract.run import ExtractConfig, extract

    root = tmp_path_factory.mktemp("cache")
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(root), unit_rows=256)
    return extract(config, progress=False, log=lambda m: None).path


@pytest.fixture
def load_script(monkeypatch):
    """``load_script("run_heads_conll")``: a script of scripts/ imported as a module, to call its main(),
    with scripts/ on sys.path as ``python scripts/NAME.py`` has it (for scripts/_common.py)."""
    import importlib.util

    scripts = Path(__file__).resolve().parents[1] / "scripts"
    monkeypatch.syspath_prepend(str(scripts))

    def load(name: str):
        path = scripts / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def entry_copy(tiny_cache, tmp_path) -> str:
    """A copy of the tiny entry under its own cache root (tmp_path/root), to damage or delete."""
    import shutil

    root = tmp_path / "root"
    root.mkdir()
    dst = root / os.path.basename(tiny_cache)
    shutil.copytree(tiny_cache, dst)
    return str(dst)


@pytest.fixture(autouse=True)
def _fresh_activation_store():
    """Each test opens its splits anew: the process-wide store (`layerfuse.training.store`) would
    otherwise hand one test the splits another test read, under another memory budget."""
    from layerfuse.training import store

    store.clear()
    yield
    store.clear()
