"""Probing a subword entry with several label sets (NER, POS, chunk): one scored row per word, the
word's own string for its control label, accuracy for token sets and F1 for span sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerfuse.cache.reader import open_entry
from layerfuse.probing.data import label_sets, label_view, scored_tokens
from layerfuse.probing.probe import ProbeConfig
from layerfuse.probing.run import run_probes

pytestmark = pytest.mark.usefixtures("one_thread")
POS = ["DT", "NN", "VB", "JJ"]


@pytest.fixture(scope="module")
def subword_entry(tmp_path_factory, tiny_bert_dir):
    """A subword entry (special-token rows kept) of a CoNLL-2003 layout whose POS and chunk tags depend
    on the word, so that they are learnable."""
    from conftest import make_sentences

    from layerfuse.extract.run import ExtractConfig, extract

    d: Path = tmp_path_factory.mktemp("conll_probe")
    for name, n, seed in (("train.txt", 60, 1), ("dev.txt", 20, 2)):
        with (d / name).open("w", encoding="utf-8") as f:
            for words, tags in make_sentences(n, seed):
                for w, t in zip(words, tags):
                    pos = POS[len(w) % 4]
                    f.write(f"{w} {pos} {'B-NP' if pos == 'DT' else 'I-NP' if pos != 'VB' else 'B-VP'} {t}\n")
                f.write("\n")
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(d), cache_dir=str(tmp_path_factory.mktemp("c")),
                           unit_rows=256, granularity="subword", special_tokens=True)
    return open_entry(extract(config, progress=False, log=lambda m: None).path)


def test_a_subword_entry_scores_one_row_per_word(subword_entry):
    view = label_view(subword_entry, "pos")
    split = view.split("dev")
    tokens = scored_tokens(split)
    words = split.words()
    assert split.n_rows > sum(map(len, words))  # subwords and special tokens: more rows than words
    assert len(tokens) == sum(map(len, words))
    assert tokens.words.tolist() == [w for sentence in words for w in sentence]
    assert tokens.counts.tolist() == [len(s) for s in words]
    names = view.label_names
    assert [names[i] for i in tokens.labels] == [POS[len(w) % 4] for w in tokens.words]


def test_token_and_span_sets_are_scored_their_way(subword_entry, tmp_path):
    sets = label_sets(subword_entry)
    assert sets["pos"]["kind"] == "token" and sets["chunk"]["kind"] == "span"
    records = run_probes(subword_entry, out=str(tmp_path), label_set_names=["pos", "chunk"], seeds=[0],
                         config=ProbeConfig(epochs=2, min_steps=100, lr=1e-2))
    pos = [r for r in records if r["label_set"] == "pos" and not r["control"]]
    chunk = [r for r in records if r["label_set"] == "chunk" and not r["control"]]
    assert all(set(r["scores"]["dev"]) == {"acc"} for r in pos)
    assert all(set(r["scores"]["dev"]) == {"acc", "f1"} for r in chunk)
    # POS is a function of the word here: a linear probe of the embedding layer reads much of it (the
    # majority tag is 36% of dev; a random 32-wide embedding does not separate every type)
    assert pos[0]["probe"] == 0 and pos[0]["scores"]["dev"]["acc"] > 0.7
    assert pos[0]["n_classes"] == len(sets["pos"]["names"])
