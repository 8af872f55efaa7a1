"""One word splitter: `predict` and an exported model's pipeline split raw text into the same words
(hyphens, apostrophes, scores, URLs, e-mail addresses, emoji), so they find the same entity spans."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from layerfuse.cache.reader import open_entry
from layerfuse.cli.predict import main as predict
from layerfuse.extract.run import ExtractConfig, extract
from layerfuse.hf.export import export_head
from layerfuse.inference import split_words
from layerfuse.inference.words import PATTERN
from layerfuse.training import TrainConfig, train_head
from layerfuse.training.checkpoint import save_checkpoint
from layerfuse.training.data import load_data

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["Alice-Carolson met O'Dave in Paris's old town, Acme won 3-1 at https://acme.com/paris?x=1 today.",
         "Write to grace@globex.org 🎉 said Heidi-Bobson of Hooli-Initech in Berlin-Oslo, 2024-01-05.",
         "Rome’s Erin met Frank’s team 🇫🇷 from Umbrella Inc. 👍🏽 and Madrid."]


def test_split_words_by_hand():
    text = "Jean-Claude's 3-1 win: https://a.io/x a.b@c.org 🎉 東京 a\u200bb \u200d ok."
    assert [w for w, _, _ in split_words(text)] == [
        "Jean", "-", "Claude", "'", "s", "3", "-", "1", "win", ":", "https", ":", "/", "/", "a", ".", "io", "/",
        "x", "a", ".", "b", "@", "c", ".", "org", "🎉", "東", "京", "a\u200bb", "ok", "."]
    assert all(text[lo:hi] == w for w, lo, hi in split_words(text))  # character offsets


def test_a_tab_or_newline_is_no_part_of_the_next_word():
    """Control characters may open a word (a BERT normalizer deletes them), whitespace ones may not: a
    tab before Berlin made the word and its entity '\tBerlin', where the exported pipeline had 'Berlin'."""
    text = "Visit\tBerlin and\r\nLondon \x01Rome"
    assert split_words(text) == [("Visit", 0, 5), ("Berlin", 6, 12), ("and", 13, 16), ("London", 18, 24),
                                 ("\x01Rome", 25, 30)]


def _export(cache: str, folder, *, every_word: str | None = None) -> str:
    """A head trained a few epochs on ``cache``, with its run record, exported; returns the run record.
    ``every_word``: a tag the head then gives every word whatever its input (each word an entity)."""
    import torch

    entry = open_entry(cache)
    data = load_data(entry)
    result = train_head(TrainConfig(fusion="concat", shots=None, epochs=4, seed=0, lr=1e-2), data)
    if every_word:
        with torch.no_grad():
            result.tagger.classifier.weight.zero_()
            result.tagger.classifier.bias.copy_(torch.eye(len(data.label_names))[data.label_names.index(every_word)])
    stem = str(folder / "concat")
    weights, _ = save_checkpoint(stem + ".head", result.tagger, tagger_kwargs=result.tagger_kwargs,
                                 layers=result.layers, label_names=data.label_names, cache_meta=data.meta,
                                 cache_path=entry.path, config=result.config)
    with open(stem + ".json", "w", encoding="utf-8") as f:
        json.dump({"best_dev_f1": result.best_dev_f1, "test_f1_at_best": result.test_f1_at_best,
                   "checkpoint": weights}, f)
    export_head(stem + ".json", str(folder / "exported"))
    return stem + ".json"


@pytest.fixture(scope="module")
def roberta_cache(tiny_roberta_dir, tiny_conll_dir, tmp_path_factory):
    config = ExtractConfig(model=str(tiny_roberta_dir), dataset=str(tiny_conll_dir),
                           cache_dir=str(tmp_path_factory.mktemp("cache")), unit_rows=256, splits=("train", "dev"))
    return extract(config, progress=False, log=lambda m: None).path


@pytest.mark.parametrize("cache", ["tiny_cache", "roberta_cache"], ids=["wordpiece", "byte-level-bpe"])
def test_pipeline_finds_predicts_spans(cache, request, tmp_path):
    from transformers import AutoTokenizer, pipeline

    run = _export(request.getfixturevalue(cache), tmp_path)
    folder = str(tmp_path / "exported")
    out = CliRunner().invoke(predict, ["--head", run.removesuffix(".json") + ".head", "--json", "--device", "cpu",
                                       *sum((["--text", t] for t in TEXTS), [])])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.output.splitlines()]
    assert [r["words"] for r in rows] == [[w for w, _, _ in split_words(t)] for t in TEXTS]
    assert "-" in rows[0]["words"] and "Alice" in rows[0]["words"]  # hyphenated names split, as documented
    found = [[(e["type"], *e["chars"]) for e in r["entities"]] for r in rows]
    assert sum(map(len, found)) >= 3, "the head tags almost nothing: a weak comparison"

    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert json.loads(tokenizer.backend_tokenizer.to_str())["pre_tokenizer"]["pretokenizers"][0]["pattern"] == \
        {"Regex": PATTERN}  # the exported tokenizer splits with predict's pattern, declared once
    ner = pipeline("token-classification", model=folder, aggregation_strategy="simple", device="cpu")
    assert [[(e["entity_group"], e["start"], e["end"]) for e in ner(t)] for t in TEXTS] == found
    assert os.path.isfile(os.path.join(folder, "tokenizer.json"))


# Separators a BERT normalizer deletes before the exported tokenizer splits: a vertical tab, a form feed,
# NEL, U+FFFD (text decoded with errors="replace").
SEPARATED = ["Angela\ufffdMerkel met Paris\x0cBerlin and Oslo\x0bRome\x85Madrid .", "Acme\ufffd\ufffd Inc \x0c\x0b ok"]


@pytest.mark.parametrize("cache", ["tiny_cache", "roberta_cache"], ids=["wordpiece", "byte-level-bpe"])
def test_the_exported_tokenizer_splits_at_separators_its_normalizer_deletes(cache, request, tmp_path):
    """The exported MiniLM read 'Angela\ufffdMerkel' and 'Paris\x0cBerlin' as one word each, where predict
    tagged two: its BERT normalizer deleted the character before the word splitter ran."""
    from transformers import AutoTokenizer

    from layerfuse.inference.predictor import Predictor

    run = _export(request.getfixturevalue(cache), tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "exported"))
    predictor = Predictor(run.removesuffix(".json") + ".head", device="cpu")
    for text in SEPARATED:
        enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
        spans: dict[int, list[int]] = {}
        for word, (start, end) in zip(enc.word_ids(), enc["offset_mapping"]):
            spans.setdefault(word, [start, end])[1] = end
        assert [tuple(s) for s in spans.values()] == [(lo, hi) for _, lo, hi in predictor.words(text)], text
    assert {"Angela", "Merkel", "Paris", "Berlin"} <= {w for w, _, _ in predictor.words(SEPARATED[0])}


# Characters a BERT normalizer deletes (zero-width joiner and space, soft hyphen, NUL, a byte-order mark, a
# lone combining accent under an accent-stripping one) before, inside and after words.
DELETED = "\u200dBerlin met \x00Oslo\u00ad and \u0301Lyon, \ufeffAcme\u200b\u200b Ro\u00adme \x01\x02Kim"


@pytest.mark.parametrize("cache", ["tiny_cache", "roberta_cache"], ids=["wordpiece", "byte-level-bpe"])
def test_an_entity_span_holds_no_character_the_tokenizer_deletes_around_it(cache, request, tmp_path):
    """predict's entity began at a zero-width joiner, NUL or byte-order mark before the word ("\u200dBerlin",
    chars 0-7) and ended after a soft hyphen behind it, where the exported model's pipeline, which never sees
    those characters, began and ended at the word's letters: the two reported different spans of one text."""
    from transformers import pipeline

    run = _export(request.getfixturevalue(cache), tmp_path, every_word="B-PER")
    out = CliRunner().invoke(predict, ["--head", run.removesuffix(".json") + ".head", "--json", "--device", "cpu",
                                       "--text", DELETED])
    assert out.exit_code == 0, out.output
    row = json.loads(out.output)
    found = [(e["text"], *e["chars"]) for e in row["entities"]]
    assert all(DELETED[lo:hi] == text for text, lo, hi in found) and len(found) == len(row["words"])
    if cache == "tiny_cache":  # its normalizer deletes them all: each entity is the word's letters alone
        assert [text for text, _, _ in found] == ["Berlin", "met", "Oslo", "and", "Lyon", ",", "Acme",
                                                  "Ro\u00adme", "Kim"]
    ner = pipeline("token-classification", model=str(tmp_path / "exported"), aggregation_strategy="simple",
                   device="cpu")
    assert [(DELETED[e["start"]:e["end"]], e["start"], e["end"]) for e in ner(DELETED)] == found
