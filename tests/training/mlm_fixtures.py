"""MLM fixtures: a tiny BERT with its own MLM head (so the cache's lm/* arrays hold one), a small
text corpus in train/dev/test.txt layout, and the MLM cache entry of the two.

Not a conftest.py: a second module named ``conftest`` would shadow tests/conftest.py for the tests
that import from it. Test modules import these fixtures by name; each is built once per session
(`_once`), whichever module asks first.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

# The tiny BERT's vocabulary (tests/conftest.py) spells these words whole.
PEOPLE = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
PLACES = ["paris", "london", "berlin", "madrid", "rome", "vienna", "oslo"]
ORGS = ["acme", "globex", "initech", "umbrella", "hooli"]

_BUILT: dict = {}
BLOCK = 16  # subwords per block with [CLS] and [SEP]: the tiny BERT has 32 positions


def _document(rng: random.Random) -> str:
    """A few sentences of a small grammar: predictable enough for a tiny head to learn something."""
    sentences = []
    for _ in range(rng.randint(2, 5)):
        who, where, org = rng.choice(PEOPLE), rng.choice(PLACES), rng.choice(ORGS)
        sentences.append(rng.choice([f"{who} visited {where} today.", f"{who} met {org} in {where}.",
                                     f"the big {org} said {who} is from {where}.",
                                     f"{who} and {who} went to {where}."]))
    return " ".join(sentences)


def write_text_corpus(directory: Path, *, seed: int = 0, sizes=(60, 15, 15)) -> Path:
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for name, n in zip(("train", "dev", "test"), sizes):
        (directory / f"{name}.txt").write_text("\n\n".join(_document(rng) for _ in range(n)) + "\n")
    return directory


def _once(name: str, tmp_path_factory, build):
    """``build()`` once per test session, shared by every module that imports the fixture."""
    key = (name, str(tmp_path_factory.getbasetemp()))
    if key not in _BUILT:
        _BUILT[key] = build()
    return _BUILT[key]


@pytest.fixture(scope="session")
def tiny_text_dir(tmp_path_factory) -> Path:
    return _once("text", tmp_path_factory, lambda: write_text_corpus(tmp_path_factory.mktemp("tiny_text") / "tinytext"))


@pytest.fixture(scope="session")
def tiny_mlm_bert_dir(tmp_path_factory, tiny_bert_dir) -> Path:
    """The tiny BERT's tokenizer and shape, saved as BertForMaskedLM: a checkpoint that ships an MLM head."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    def build():
        d = tmp_path_factory.mktemp("tiny_mlm_bert")
        BertTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(d)
        torch.manual_seed(0)
        BertForMaskedLM(BertConfig.from_pretrained(tiny_bert_dir)).save_pretrained(d)
        return d

    return _once("bert", tmp_path_factory, build)


@pytest.fixture(scope="session")
def tiny_mlm_cache(tmp_path_factory, tiny_mlm_bert_dir, tiny_text_dir) -> str:
    from layerfuse.extract.run import ExtractConfig, extract

    def build():
        config = ExtractConfig(model=str(tiny_mlm_bert_dir), dataset=str(tiny_text_dir), task="mlm", block_size=BLOCK,
                               cache_dir=str(tmp_path_factory.mktemp("mlm_cache")), unit_rows=256)
        return extract(config, progress=False, log=lambda m: None).path

    return _once("cache", tmp_path_factory, build)
