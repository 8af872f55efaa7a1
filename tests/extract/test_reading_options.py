"""Which columns of CoNLL-style files and which fields of a HF dataset hold the words and the tags
(`Reading`; the CLI's --columns, --tokens-field, --tags-field): read as named, and a bad column or a
missing field is one `error:` line naming the file, line and value."""

from __future__ import annotations

import json

import pytest
from cli_output import one_error_line, one_usage_error
from click.testing import CliRunner
from conftest import write_conll

from layerfuse.errors import LayerfuseError, OptionError
from layerfuse.extract.datasets import Reading, load_dataset, parse_columns

TRAIN = [(["Alice", "met", "Bob", "Smith"], ["B-PER", "O", "B-PER", "I-PER"]),
         (["Acme", "Inc", "is", "in", "Paris"], ["B-ORG", "I-ORG", "O", "O", "B-LOC"])]
DEV = [(["Carol", "visited", "Rome"], ["B-PER", "O", "B-LOC"])]
POS = {"O": "NN", "B-PER": "NNP", "I-PER": "NNP", "B-ORG": "NNP", "I-ORG": "NNP", "B-LOC": "NNP"}


def _write(path, sentences):
    """Lines ``WORD TAG POS CHUNK``: the tag in column 1, not the last."""
    write_conll(path, sentences, line=lambda w, t: f"{w} {t} {POS[t]} {'O' if t == 'O' else 'B-NP'}")


@pytest.fixture
def tag_in_column_1(tmp_path):
    data = tmp_path / "mine"
    data.mkdir()
    _write(data / "train.txt", TRAIN)
    _write(data / "dev.txt", DEV)
    return data


def _hf(tmp_path, *, strings=False):
    import datasets

    names = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC"]
    rows = lambda sentences: {"words": [w for w, _ in sentences],  # noqa: E731
                              "labels": [t if strings else [names.index(x) for x in t] for _, t in sentences]}
    tags = datasets.Value("string") if strings else datasets.ClassLabel(names=names)
    features = datasets.Features({"words": datasets.Sequence(datasets.Value("string")),
                                  "labels": datasets.Sequence(tags)})
    folder = tmp_path / ("hf-strings" if strings else "hf")
    datasets.DatasetDict({split: datasets.Dataset.from_dict(rows(s), features=features)
                          for split, s in (("train", TRAIN), ("validation", DEV))}).save_to_disk(str(folder))
    return folder


def test_columns_name_the_word_the_tag_and_more_label_sets(tag_in_column_1):
    data = load_dataset(str(tag_in_column_1), read=Reading(columns="word=0,ner=1,pos=2,chunk=3"))
    assert data.splits["train"] == TRAIN and data.splits["dev"] == DEV
    assert data.label_set_names == ["ner", "pos", "chunk"]
    assert data.column("pos").kind == "token" and data.column("pos").tags["dev"] == [["NNP", "NN", "NNP"]]
    assert data.column("chunk").kind == "span" and data.column("chunk").names == ["O", "B-NP", "I-NP"]
    assert data.source.endswith("(columns word=0,ner=1,pos=2,chunk=3)")
    only = load_dataset(str(tag_in_column_1 / "train.txt"), read=Reading(columns={"ner": 1}))  # word: 0
    assert only.splits["train"] == TRAIN and only.label_set_names == ["ner"]


def test_a_load_reads_as_its_reading_says_and_nothing_else(tag_in_column_1):
    assert load_dataset(str(tag_in_column_1), read=Reading(columns="word=0,ner=1")).splits["train"] == TRAIN
    default = load_dataset(str(tag_in_column_1))  # the tag is the last column by default: here the chunks
    assert default.entity_types == ["NP"] and default.label_set_names == ["ner"]


def test_four_columns_that_are_not_conll2003_s_read_word_and_tag_only(tmp_path):
    """word lemma POS NER: four columns whose third holds no IOB tags is no CoNLL-2003 layout (word POS
    chunk NER). It read the POS column as chunk and stopped at its first tag; the middle columns now stay
    unread, as for any other width, and --columns names them."""
    data = tmp_path / "lemmas"
    data.mkdir()
    for name, sentences in (("train.txt", TRAIN), ("dev.txt", DEV)):
        write_conll(data / name, sentences, line=lambda w, t: f"{w} {w.lower()} {POS[t]} {t}")
    read = load_dataset(str(data))
    assert read.splits["train"] == TRAIN and read.label_set_names == ["ner"]
    named = load_dataset(str(data), read=Reading(columns="word=0,ner=3,pos=2"))
    assert named.label_set_names == ["ner", "pos"] and named.column("pos").tags["dev"] == [["NNP", "NN", "NNP"]]


def test_predict_conll_reads_a_file_as_the_head_s_data_was_read(tmp_path, tiny_bert_dir, tag_in_column_1):
    """A head trained on `--columns word=0,ner=1,...` data scores a file of that layout: predict --conll read
    its last column (the chunks) as the gold tags and refused them; --columns overrides."""
    from layerfuse.cli.predict import main as predict
    from layerfuse.cli.train import main as train

    assert _extract(tmp_path, tiny_bert_dir, tag_in_column_1, "--columns", "word=0,ner=1,pos=2").exit_code == 0
    trained = CliRunner().invoke(train, ["--model", str(tiny_bert_dir), "--dataset", str(tag_in_column_1),
                                         "--columns", "word=0,ner=1,pos=2", "--cache-dir", str(tmp_path / "cache"),
                                         "--fusion", "base", "--shots", "all", "--epochs", "1", "--quiet",
                                         "--out", str(tmp_path / "runs")])
    assert trained.exit_code == 0, trained.output
    head = next((tmp_path / "runs").glob("*.head.json")).with_suffix("")  # the stem: RUN.head
    dev = str(tag_in_column_1 / "dev.txt")
    scored = CliRunner().invoke(predict, ["--head", str(head), "--conll", dev, "--json", "--out", str(tmp_path / "o")])
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.output.splitlines()[0])["micro"]["support"] == 2  # Carol, Rome: the NER column
    plain = tmp_path / "plain.txt"  # word and tag alone: the pos column the head never reads is not asked of it
    write_conll(plain, DEV, line=lambda w, t: f"{w} {t}")
    two = CliRunner().invoke(predict, ["--head", str(head), "--conll", str(plain), "--json",
                                       "--out", str(tmp_path / "p")])
    assert two.exit_code == 0 and json.loads(two.output.splitlines()[0])["micro"]["support"] == 2, two.output
    chunks = CliRunner().invoke(predict, ["--head", str(head), "--conll", dev, "--columns", "word=0,ner=3"])
    assert chunks.exit_code == 1 and "entity type 'NP'" in chunks.output and "NP" in chunks.output
    lone = CliRunner().invoke(predict, ["--head", str(head), "--text", "Alice", "--columns", "word=0,ner=1"])
    assert lone.exit_code == 2 and "--columns goes with --conll" in lone.output


@pytest.mark.parametrize("text, message", [
    ("word=0,ner=x", "--columns 'word=0,ner=x': 'x' is not a column number"),
    ("word=0,ner=-1", "'-1' is not a column number"),
    ("word0,ner=1", "'word0' is not NAME=COLUMN"),
    ("word=0", "name a tag column, e.g. ner=3 or pos=1"),
    ("word=2,pos=2", "word and pos are the same column (2)"),
    ("word=1,ner=1", "word and ner are the same column (1)"),
    ("word=0,ner=3,pos=3", "ner and pos are the same column (3)"),  # else NER tags stored as 'pos'
    ("word=0,ner=3,pos=0", "word and pos are the same column (0)"),
    ("ner=1,ner=2", "ner is given twice"),
])
def test_a_bad_columns_value_is_named(text, message):
    with pytest.raises(LayerfuseError) as err:
        parse_columns(text)
    assert message in str(err.value)


def test_hf_fields_are_named(tmp_path):
    for strings in (False, True):
        fields = Reading(tokens_field="words", tags_field="labels")
        data = load_dataset(str(_hf(tmp_path, strings=strings)), read=fields)
        assert data.splits["train"] == TRAIN and data.splits["dev"] == DEV
        assert data.source.endswith("(fields words, labels)")


def _extract(tmp_path, model, data, *options):
    return CliRunner().invoke(_extract_main(), ["--model", str(model), "--dataset", str(data), "--cache-dir",
                                                str(tmp_path / "cache"), "--quiet", *options])


def _extract_main():
    from layerfuse.cli.extract import main

    return main


def test_extract_reads_the_columns_given_and_the_entry_is_found_again(tmp_path, tiny_bert_dir, tag_in_column_1):
    from layerfuse.cache.reader import open_entry
    from layerfuse.cli.options import resolve

    out = _extract(tmp_path, tiny_bert_dir, tag_in_column_1, "--columns", "word=0,ner=1,pos=2")
    assert out.exit_code == 0, out.output
    path = out.output.split("cached: ", 1)[1].split()[0]
    entry = open_entry(path)
    assert entry.meta["entity_types"] == ["LOC", "ORG", "PER"]
    assert entry.meta["dataset_source"].endswith("(columns word=0,ner=1,pos=2)")
    found = resolve(None, str(tiny_bert_dir), str(tag_in_column_1), str(tmp_path / "cache"), quiet=True,
                    read={"columns": "word=0,ner=1,pos=2"})  # what --columns on train-head, sweep, rank-layers give
    assert found.path == entry.path


def test_extract_reads_named_hf_fields(tmp_path, tiny_bert_dir):
    out = _extract(tmp_path, tiny_bert_dir, _hf(tmp_path), "--tokens-field", "words", "--tags-field", "labels")
    assert out.exit_code == 0, out.output


def test_a_column_past_the_line_is_one_error_line(tmp_path, tiny_bert_dir, tag_in_column_1):
    line = one_error_line(_extract(tmp_path, tiny_bert_dir, tag_in_column_1, "--columns", "word=0,ner=7"))
    assert "train.txt:3: --columns ner=7, but the line has 4 columns (0 to 3): 'Alice B-PER NNP B-NP'" in line
    assert not (tmp_path / "cache").exists()


def test_a_column_of_no_tags_is_one_error_line(tmp_path, tiny_bert_dir, tag_in_column_1):
    line = one_error_line(_extract(tmp_path, tiny_bert_dir, tag_in_column_1, "--columns", "word=0,ner=2"))
    assert "train.txt:3 (--columns ner=2): malformed tag 'NNP'" in line


def test_a_bad_columns_value_is_a_usage_error(tmp_path, tiny_bert_dir, tag_in_column_1):
    """A value of the command line (exit 2, as click's own), not a failure of the data."""
    line = one_usage_error(_extract(tmp_path, tiny_bert_dir, tag_in_column_1, "--columns", "word=0,ner=three"))
    assert "'three' is not a column number" in line


def test_a_missing_hf_field_is_one_error_line(tmp_path, tiny_bert_dir):
    line = one_error_line(_extract(tmp_path, tiny_bert_dir, _hf(tmp_path), "--tokens-field", "words",
                                   "--tags-field", "ner"))
    assert "hf split 'train': no field 'ner' (--tags-field); it has words, labels" in line


@pytest.mark.parametrize("options, message", [
    (["--columns", "word=0,ner=1"], "--columns names the columns of CoNLL-style files"),
])
def test_columns_on_a_hf_dataset_is_one_error_line(tmp_path, tiny_bert_dir, options, message):
    assert message in one_error_line(_extract(tmp_path, tiny_bert_dir, _hf(tmp_path), *options))


def test_fields_on_conll_files_is_one_error_line(tmp_path, tiny_bert_dir, tag_in_column_1):
    line = one_error_line(_extract(tmp_path, tiny_bert_dir, tag_in_column_1, "--tags-field", "labels"))
    assert "--tokens-field and --tags-field name the fields of a HF dataset" in line


def test_reading_options_refuse_raw_text(tmp_path, tiny_bert_dir, tag_in_column_1):
    # (a server's job takes them: tests/serve/test_jobs.py::test_extract_server_reads_the_columns_it_is_given)
    line = one_usage_error(_extract(tmp_path, tiny_bert_dir, tag_in_column_1, "--columns", "word=0,ner=1",
                                    "--task", "mlm"))
    assert "--columns, --tokens-field and --tags-field name where the tags are: --task mlm has none" in line


def test_a_bad_span_column_names_its_first_bad_line_as_columns_counts(tmp_path):
    """The POS column read as chunk (a slip in --columns): every tag is malformed; the error names the
    first line, the same on every run, and the column as --columns counts it (from 0)."""
    data = tmp_path / "conll"
    data.mkdir()
    lines = ["Alice NNP B-NP B-PER", "met VBD B-VP O", "Bob NNP B-NP B-PER", "in IN B-PP O", "Paris NNP B-NP B-LOC"]
    (data / "train.txt").write_text("\n".join(lines) + "\n\n")
    with pytest.raises(LayerfuseError) as err:
        load_dataset(str(data), read=Reading(columns="word=0,ner=3,chunk=1"))
    assert "train.txt:1: chunk column (--columns chunk=1, counting from 0): malformed tag 'NNP'" in str(err.value)


def test_a_head_records_its_own_reading_of_an_entry_made_of_the_same_words(tmp_path, tiny_bert_dir, tag_in_column_1):
    """The same words and tags in another layout find the entry made first: the head recorded that entry's
    reading (no --columns), and predict --conll then read the last column of its own layout's file."""
    from layerfuse.cli.predict import main as predict
    from layerfuse.cli.train import main as train

    first = tmp_path / "first"  # WORD POS CHUNK TAG: the tag last, as CoNLL-2003 lays it out
    first.mkdir()
    for name, sentences in (("train.txt", TRAIN), ("dev.txt", DEV)):
        write_conll(first / name, sentences, line=lambda w, t: f"{w} {POS[t]} {'O' if t == 'O' else 'B-NP'} {t}")
    common = ["--model", str(tiny_bert_dir), "--cache-dir", str(tmp_path / "cache"), "--fusion", "base", "--shots",
              "all", "--epochs", "1", "--quiet"]
    assert CliRunner().invoke(train, [*common, "--dataset", str(first), "--out", str(tmp_path / "a")]).exit_code == 0
    trained = CliRunner().invoke(train, [*common, "--dataset", str(tag_in_column_1), "--columns", "word=0,ner=1",
                                         "--out", str(tmp_path / "b")])
    assert trained.exit_code == 0 and "extracted" not in trained.output, trained.output  # the first entry, reused
    head = next((tmp_path / "b").glob("*.head.json")).with_suffix("")
    scored = CliRunner().invoke(predict, ["--head", str(head), "--conll", str(tag_in_column_1 / "dev.txt"), "--json",
                                          "--out", str(tmp_path / "o")])
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.output.splitlines()[0])["micro"]["support"] == 2


def _pos_files(tmp_path, name, line):
    """train/dev files of TRAIN and DEV's words with their POS tags in column 1, ``line`` writing each word."""
    data = tmp_path / name
    data.mkdir()
    for split, sentences in (("train.txt", TRAIN), ("dev.txt", DEV)):
        write_conll(data / split, sentences, line=lambda w, t: line(w, POS[t]))
    return data


def test_columns_without_ner_make_the_first_set_named_the_primary_one(tmp_path):
    """--columns that name no ner: the first set named is the primary one, a token set unless it is chunk, and
    the columns no name reads are not read (a junk NER column, `_`, stays unchecked)."""
    junk = _pos_files(tmp_path, "junk", lambda w, p: f"{w} {p} _ _")
    data = load_dataset(str(junk), read=Reading(columns="word=0,pos=1"))
    assert data.primary == "pos" and data.primary_kind == "token" and data.label_set_names == ["pos"]
    assert data.label_names == ["NN", "NNP"] and data.splits["dev"] == [(["Carol", "visited", "Rome"],
                                                                         ["NNP", "NN", "NNP"])]
    chunks = load_dataset(str(tag_chunks := _pos_files(tmp_path, "chunks", lambda w, p: f"{w} {p} I-NP _")),
                          read=Reading(columns="word=0,chunk=2,pos=1"))
    assert chunks.primary == "chunk" and chunks.primary_kind == "span" and chunks.label_set_names == ["chunk", "pos"]
    assert chunks.label_names == ["O", "B-NP", "I-NP"] and chunks.splits["dev"][0][1] == ["B-NP", "I-NP", "I-NP"]
    line = one_error_line(_extract(tmp_path, "unused-model", tag_chunks, "--columns", "word=0,chunk=1"))
    assert "train.txt:3 (--columns chunk=1): malformed tag 'NNP'" in line  # a column that is read is checked
    with pytest.raises(OptionError, match="scheme .iobes.: the primary label set pos holds word classes"):
        load_dataset(str(tag_chunks), read=Reading(columns="word=0,pos=1"), scheme="iobes")  # it named no tags read


@pytest.mark.parametrize("layout, line", [("words and POS", lambda w, p: f"{w} {p}"),
                                          ("a junk NER column", lambda w, p: f"{w} {p} _ _")])
def test_a_pos_head_trains_on_files_without_ner_tags(tmp_path, tiny_bert_dir, layout, line):
    """A POS-tagged corpus (words and POS only, or a last column of `_`) extracts, trains a POS head and is
    scored by it: extraction stopped at the NER column the POS head never reads. Read by default, the error
    says how to name the columns."""
    from layerfuse.cache.reader import open_entry
    from layerfuse.cli.predict import main as predict
    from layerfuse.cli.train import main as train

    data = _pos_files(tmp_path, "pos", line)
    hint = one_error_line(_extract(tmp_path, tiny_bert_dir, data))
    assert "train.txt:3: malformed tag" in hint and "--columns word=0,pos=1" in hint
    out = _extract(tmp_path, tiny_bert_dir, data, "--columns", "word=0,pos=1")
    assert out.exit_code == 0, out.output
    entry = open_entry(out.output.split("cached: ", 1)[1].split()[0])
    assert entry.meta["primary_labels"] == "pos" and entry.meta["label_names"] == ["NN", "NNP"]
    trained = CliRunner().invoke(train, ["--model", str(tiny_bert_dir), "--dataset", str(data), "--columns",
                                         "word=0,pos=1", "--cache-dir", str(tmp_path / "cache"), "--fusion", "base",
                                         "--shots", "all", "--epochs", "1", "--quiet", "--out", str(tmp_path / "runs")])
    assert trained.exit_code == 0 and "extracted" not in trained.output, trained.output
    record = json.loads(next((tmp_path / "runs").glob("*-s0.json")).read_text())
    assert "best_dev_accuracy" in record and record["config"].get("labels") in (None, "pos")
    head = next((tmp_path / "runs").glob("*.head.json")).with_suffix("")
    scored = CliRunner().invoke(predict, ["--head", str(head), "--conll", str(data / "dev.txt"), "--json",
                                          "--out", str(tmp_path / "o")])
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.output.splitlines()[0])["micro"]["support"] == 3  # every word, scored by accuracy


def test_predict_conll_asks_a_pos_head_s_file_for_no_ner_column(tmp_path, tiny_bert_dir, tag_in_column_1):
    """A POS head of an entry read as word=0,ner=1,pos=2 scores a file of that layout whose NER column is `_`:
    it asked the file for the NER column too, and stopped at its first `_`. --columns that name no POS
    column are one line saying so."""
    from layerfuse.cli.predict import main as predict
    from layerfuse.cli.train import main as train

    trained = CliRunner().invoke(train, ["--model", str(tiny_bert_dir), "--dataset", str(tag_in_column_1),
                                         "--columns", "word=0,ner=1,pos=2", "--labels", "pos", "--cache-dir",
                                         str(tmp_path / "cache"), "--fusion", "base", "--shots", "all", "--epochs",
                                         "1", "--quiet", "--out", str(tmp_path / "runs")])
    assert trained.exit_code == 0, trained.output
    head = next((tmp_path / "runs").glob("*.head.json")).with_suffix("")
    unlabelled = tmp_path / "no-ner.txt"
    write_conll(unlabelled, DEV, line=lambda w, t: f"{w} _ {POS[t]}")
    scored = CliRunner().invoke(predict, ["--head", str(head), "--conll", str(unlabelled), "--json",
                                          "--out", str(tmp_path / "o")])
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.output.splitlines()[0])["micro"]["support"] == 3
    ner_only = str(tag_in_column_1 / "dev.txt")
    other = one_error_line(CliRunner().invoke(predict, ["--head", str(head), "--conll", ner_only, "--columns",
                                                        "word=0,ner=1"]))
    assert "dev.txt: the head tags pos, and the file (columns word=0,ner=1) has no pos column" in other

