"""CoNLL-U reader: syntactic words, multiword-token ranges, empty nodes, comments, malformed lines,
and how a Universal Dependencies treebank directory is recognised as a dataset."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import pytest

from layerfuse.errors import LayerfuseError
from layerfuse.extract.conllu import read_conllu, read_treebank, treebank_files
from layerfuse.extract.datasets import load_dataset


def conllu(*rows: str) -> str:
    """Rows written with single spaces between the 10 fields (spaces inside a field as ``~``)."""
    lines = [row if row.startswith("#") else "\t".join(row.split()).replace("~", " ") for row in rows]
    return "".join(line + "\n" for line in lines)


NORMAL = conllu(
    "# sent_id = s1",
    "# text = They buy books.",
    "# newdoc id = d1",
    "1 They they PRON PRP Case=Nom 2 nsubj 2:nsubj _",
    "2 buy buy VERB VBP _ 0 root 0:root _",
    "3 books book NOUN NNS Number=Plur 2 obj 2:obj SpaceAfter=No",
    "4 . . PUNCT . _ 2 punct 2:punct _",
    "",
)
MULTIWORD = conllu(
    "# text = vámonos al mar",
    "1-2 vámonos _ _ _ _ _ _ _ _",
    "1 vamos ir VERB _ _ 0 root _ _",
    "2 nos nosotros PRON _ _ 1 obj _ _",
    "3-4 al _ _ _ _ _ _ _ _",
    "3 a a ADP _ _ 5 case _ _",
    "4 el el DET _ _ 5 det _ _",
    "5 mar mar NOUN _ _ 1 obl _ _",
    "",
)
EMPTY_NODE = conllu(
    "1 Sue Sue PROPN NNP _ 2 nsubj _ _",
    "2 likes like VERB VBZ _ 0 root _ _",
    "3 coffee coffee NOUN NN _ 2 obj _ _",
    "3.1 likes like VERB VBZ _ _ _ 2:conj _",
    "4 and and CCONJ CC _ 5 cc _ _",
    "5 Bill Bill PROPN NNP _ 2 conj _ _",
    "",
)


def write(tmp_path, text, name="x.conllu"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_normal_sentence_columns_and_comments(tmp_path):
    [s] = read_conllu(write(tmp_path, NORMAL))
    assert s.words == ["They", "buy", "books", "."]
    assert s.upos == ["PRON", "VERB", "NOUN", "PUNCT"]
    assert s.xpos == ["PRP", "VBP", "NNS", "."]
    assert s.head == [2, 0, 2, 2]
    assert s.deprel == ["nsubj", "root", "obj", "punct"]
    assert (s.sent_id, s.text) == ("s1", "They buy books.")
    assert s.labels("upos") == s.upos


def test_multiword_token_range_gives_the_syntactic_words(tmp_path):
    [s] = read_conllu(write(tmp_path, MULTIWORD))
    assert s.words == ["vamos", "nos", "a", "el", "mar"]
    assert s.upos == ["VERB", "PRON", "ADP", "DET", "NOUN"]
    assert s.xpos == ["_"] * 5  # a missing XPOS stays "_"
    assert s.head == [0, 1, 5, 5, 1]


def test_empty_node_is_skipped(tmp_path):
    [s] = read_conllu(write(tmp_path, EMPTY_NODE))
    assert s.words == ["Sue", "likes", "coffee", "and", "Bill"]
    assert s.deprel == ["nsubj", "root", "obj", "cc", "conj"]


def test_sentences_split_on_blank_lines_last_one_without_blank_line(tmp_path):
    text = NORMAL + "\n" + MULTIWORD + EMPTY_NODE.rstrip("\n")
    sentences = read_conllu(write(tmp_path, text))
    assert [len(s.words) for s in sentences] == [4, 5, 5]
    assert sentences[2].sent_id is None


def test_files_joined_with_cat_read_past_the_second_byte_order_mark(tmp_path):
    """A byte-order mark opening the second file's first line was a line of 1 field, as the CoNLL reader
    already read past it."""
    sentences = read_conllu(write(tmp_path, "\ufeff" + NORMAL + "\n" + "\ufeff" + MULTIWORD))
    assert [len(s.words) for s in sentences] == [4, 5]


def test_spaces_inside_a_form_are_kept(tmp_path):
    [s] = read_conllu(write(tmp_path, conllu("1 500~000 500~000 NUM CD _ 0 root _ _")))
    assert s.words == ["500 000"]


@pytest.mark.parametrize(
    ("rows", "line", "value"),
    [
        (("1 They they PRON PRP _ 0 root _",), 1, "9 tab-separated fields where CoNLL-U has 10: '1\\tThey"),
        (("1 a a X _ _ 0 root _ _", "x b b X _ _ 1 dep _ _"), 2, "'x'"),  # id not a number
        (("1 a a X _ _ 0 root _ _", "1.5.2 b b X _ _ 1 dep _ _"), 2, "'1.5.2'"),
        (("1 a a X _ _ 0 root _ _", "3 b b X _ _ 1 dep _ _"), 2, "'3'"),  # skips 2
        (("1 a a X _ _ 0 root _ _", "1 b b X _ _ 1 dep _ _"), 2, "'1'"),  # repeats 1
        (("1 a a X _ _ 0 root _ _", "3-4 bc _ _ _ _ _ _ _ _"), 2, "'3-4'"),  # range not at the next word
        (("2-1 ab _ _ _ _ _ _ _ _",), 1, "'2-1'"),  # empty range
        (("1 a a X _ _ 0 root _ _", "2.1 e e X _ _ _ _ _ _"), 2, "'2.1'"),  # empty node after a missing word
        (("1 a a X _ _ 0 root _ _", "1.2 e e X _ _ _ _ _ _"), 2, "'1.2'"),  # 1.2 before 1.1
        (("1 a a X _ _ root 0 _ _",), 1, "'root'"),  # HEAD not an integer
        (("1 a a X _ _ 0 root _ _", "2-3 bc _ _ _ _ _ _ _ _", ""), 2,
         "up to 3, but the sentence ends at word 1: '2-3'"),
        (("1-2 ab _ _ _ _ _ _ _ _", "1 a a X _ _ 0 root _ _"), 1, "'1-2'"),  # word 2 never comes, at the file's end
    ],
)
def test_malformed_line_names_file_line_and_value(tmp_path, rows, line, value):
    path = write(tmp_path, "# c\n" + conllu(*rows))
    with pytest.raises(LayerfuseError) as err:
        read_conllu(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line + 1}: ")
    assert value in message
    assert "\n" not in message


def test_ids_restart_in_each_sentence(tmp_path):
    text = conllu("1 a a X _ _ 0 root _ _", "", "1 b b X _ _ 0 root _ _", "2 c c X _ _ 1 dep _ _")
    assert [s.words for s in read_conllu(write(tmp_path, text))] == [["a"], ["b", "c"]]


def test_file_without_words_is_an_error(tmp_path):
    with pytest.raises(LayerfuseError, match="no sentences"):
        read_conllu(write(tmp_path, "# only a comment\n\n"))


def test_treebank_files_ud_names_and_plain_names(tmp_path):
    ud = tmp_path / "UD_Spanish-Toy"
    ud.mkdir()
    for split in ("train", "dev", "test"):
        write(ud, MULTIWORD, f"es_toy-ud-{split}.conllu")
    write(ud, "raw text", "es_toy-ud-train.txt")  # UD ships the raw text beside: not a split file
    assert {s: p.name for s, p in treebank_files(ud).items()} == {
        "train": "es_toy-ud-train.conllu", "dev": "es_toy-ud-dev.conllu", "test": "es_toy-ud-test.conllu"}
    assert [len(v) for v in read_treebank(ud).values()] == [1, 1, 1]

    plain = tmp_path / "plain"
    plain.mkdir()
    write(plain, NORMAL, "train.conllu")
    write(plain, NORMAL, "validation.conllu")
    assert sorted(treebank_files(plain)) == ["dev", "train"]
    write(plain, NORMAL, "x-ud-train.conllu")
    with pytest.raises(LayerfuseError, match="more than one CoNLL-U file for split 'train'"):
        treebank_files(plain)


def test_ud_directory_is_a_dataset_of_syntactic_words_with_three_label_sets(tmp_path):
    ud = tmp_path / "UD_English-Toy"
    ud.mkdir()
    write(ud, NORMAL + "\n" + EMPTY_NODE, "en_toy-ud-train.conllu")
    write(ud, MULTIWORD, "en_toy-ud-dev.conllu")
    data = load_dataset(str(ud))
    assert data.primary == "upos" and data.primary_kind == "token"
    assert data.label_set_names == ["upos", "xpos", "deprel"]
    words, upos = data.splits["dev"][0]
    assert words == ["vamos", "nos", "a", "el", "mar"]  # the syntactic words, not "vámonos al"
    assert upos == ["VERB", "PRON", "ADP", "DET", "NOUN"]
    assert data.column("deprel").tags["dev"][0] == ["root", "obj", "case", "det", "obl"]
    assert data.column("xpos").kind == "token" and "_" in data.column("xpos").names  # no XPOS is a label too
    assert data.entity_types == data.label_names  # C of a token set: its classes
    assert len(data.splits["train"]) == 2  # the empty node's sentence keeps its words only
    single = load_dataset(str(ud / "en_toy-ud-dev.conllu"))  # a single .conllu file: train only
    assert list(single.splits) == ["train"] and single.splits["train"][0][0] == words
    with pytest.raises(LayerfuseError, match="label sets upos, xpos, deprel"):
        data.column("ner")


def test_ud_directory_without_a_train_file_is_refused(tmp_path):
    ud = tmp_path / "ud"
    ud.mkdir()
    write(ud, NORMAL, "dev.conllu")
    with pytest.raises(LayerfuseError, match=r"ud: no CoNLL-U train file .* it holds dev\.conllu"):
        load_dataset(str(ud))


def test_ud_directory_with_a_malformed_file_reports_the_line(tmp_path):
    ud = tmp_path / "ud"
    ud.mkdir()
    write(ud, "1 a a X _ _ 0 root _ _\n".replace(" ", "\t") + "3\tb\n", "train.conllu")
    with pytest.raises(LayerfuseError, match=r"train\.conllu:2: .*'3"):
        load_dataset(str(ud))


def test_conll_files_win_over_conllu_files(tmp_path):
    write(tmp_path, "EU B-ORG\nrejects O\n", "train.txt")
    write(tmp_path, NORMAL, "train.conllu")
    assert load_dataset(str(tmp_path)).splits["train"][0] == (["EU", "rejects"], ["B-ORG", "O"])
