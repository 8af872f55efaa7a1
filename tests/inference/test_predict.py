"""`predict` and live features: a head gives the same tags on live hidden states as on the cache,
and the printed entities are exactly the spans of its per-word tags."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from layerfuse.cache.reader import open_entry
from layerfuse.cli.predict import main
from layerfuse.inference import entities, split_words
from layerfuse.training import TrainConfig, train_head
from layerfuse.training.checkpoint import save_checkpoint
from layerfuse.training.data import load_data
from layerfuse.training.evaluation import predict_tags as predict


@pytest.fixture(scope="module")
def checkpoint(tiny_cache, tmp_path_factory):
    entry = open_entry(tiny_cache)
    data = load_data(entry)
    result = train_head(TrainConfig(fusion="concat", shots=None, epochs=30, seed=0, lr=1e-2), data)
    stem = str(tmp_path_factory.mktemp("ckpt") / "concat")
    save_checkpoint(stem, result.tagger, tagger_kwargs=result.tagger_kwargs, layers=result.layers,
                    label_names=data.label_names, cache_meta=data.meta, cache_path=entry.path)
    cached_tags = [[data.label_names[t] for t in p]
                   for p in predict(result.tagger, data.dev, device=torch.device("cpu"))]
    return stem, entry, cached_tags, result.best_dev_f1


def test_live_predictions_equal_cached_ones(checkpoint):
    stem, entry, cached_tags, f1 = checkpoint
    assert f1 > 0.5  # the head learned something worth comparing
    dev = entry.split("dev")
    ids = list(range(0, 40, 3))
    texts = [" ".join(words) for words in dev.words(ids)]
    out = CliRunner().invoke(main, ["--head", stem, "--json", *sum((["--text", t] for t in texts), [])])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.output.splitlines()]
    assert [r["words"] for r in rows] == dev.words(ids)
    agree = np.mean([a == b for r, i in zip(rows, ids) for a, b in zip(r["tags"], cached_tags[i])])
    assert agree >= 0.99  # float16 storage vs float32 live: at most a rare near-tie flips


def test_entities_are_the_spans_of_the_tags(checkpoint):
    stem, *_ = checkpoint
    text = "Alice met Bob in Paris, and Acme Inc visited Berlin today."
    out = CliRunner().invoke(main, ["--head", stem, "--json", "--text", text])
    row = json.loads(out.output)
    words = split_words(text)
    assert row["entities"] == entities(row["tags"], words, text)
    for e in row["entities"]:
        lo, hi = e["words"]
        assert row["tags"][lo].startswith("B-") and all(t == "I-" + e["type"] for t in row["tags"][lo + 1:hi])
        assert text[e["chars"][0]:e["chars"][1]] == e["text"]
    plain = CliRunner().invoke(main, ["--head", stem, "--text", text])
    assert plain.exit_code == 0 and plain.output.startswith(text)


def test_the_run_record_train_head_prints_is_a_head(checkpoint, tmp_path):
    """`train-head` ends by naming the run record (<run>.json), which export takes: predict takes it too,
    and tags as its head does."""
    import os

    stem, *_ = checkpoint
    record = os.path.join(os.path.dirname(stem), "run-concat.json")
    with open(record, "w", encoding="utf-8") as f:
        json.dump({"config": {"fusion": "concat"}, "checkpoint": os.path.basename(stem) + ".safetensors"}, f)
    text = "Alice met Bob in Paris ."
    by_record = CliRunner().invoke(main, ["--head", record, "--json", "--text", text])
    assert by_record.exit_code == 0, by_record.output
    assert by_record.output == CliRunner().invoke(main, ["--head", stem, "--json", "--text", text]).output
    # its stem too (RUN, as train-head prints RUN.json): not taken for a checkpoint whose weights are missing
    by_stem = CliRunner().invoke(main, ["--head", record[: -len(".json")], "--json", "--text", text])
    assert by_stem.exit_code == 0 and by_stem.output == by_record.output, by_stem.output


def test_entities_by_hand():
    text = "Acme Inc hired Bob ."
    words = split_words(text)
    got = entities(["B-ORG", "I-ORG", "O", "B-PER", "O"], words, text)
    assert got == [{"text": "Acme Inc", "type": "ORG", "words": [0, 2], "chars": [0, 8]},
                   {"text": "Bob", "type": "PER", "words": [3, 4], "chars": [15, 18]}]


def test_predict_errors_are_one_line(tmp_path):
    out = CliRunner().invoke(main, ["--head", str(tmp_path / "none"), "--text", "x"])
    assert out.exit_code == 1 and out.output.startswith("error: checkpoint file")
    missing = CliRunner().invoke(main, ["--head", str(tmp_path / "run.json"), "--text", "x"])  # the file given
    assert missing.exit_code == 1
    assert missing.stderr == f"error: no head at {tmp_path / 'run.json'}: the file does not exist\n"


def _copied_head(checkpoint, tmp_path) -> str:
    """The stem of a copy of ``checkpoint``'s head in ``tmp_path``, named ``edited``."""
    import shutil

    stem, *_ = checkpoint
    for ext in (".safetensors", ".json"):
        shutil.copy(stem + ext, tmp_path / f"edited{ext}")
    return str(tmp_path / "edited")


def _edited_then_used(edited: str, edit, out) -> list:
    """``edit`` applied to the head JSON of ``edited``, then `predict` and `export` (into ``out``) of it: their
    results."""
    from layerfuse.cli.export import main as export

    path = Path(edited + ".json")
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))
    return [CliRunner().invoke(command, args)
            for command, args in ((main, ["--head", edited, "--text", "Alice met Bob ."]),
                                  (export, [edited + ".json", "--out", str(out)]))]


@pytest.mark.parametrize("edit, needle", [
    (lambda m: m.update(label_names=m["label_names"][:-1]), "label names for a head of"),
    (lambda m: m["label_names"].reverse(), "changed since the head was written"),  # same length, names swapped
    (lambda m: m.update(layers=m["layers"][::-1]), "changed since the head was written"),
])
def test_a_head_whose_description_was_edited_is_refused(checkpoint, tmp_path, edit, needle):
    for result in _edited_then_used(_copied_head(checkpoint, tmp_path), edit, tmp_path / "model"):
        assert result.exit_code == 1 and needle in result.stderr, result.output
        assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "model").exists()  # no model that cannot run


INPUTS_EDITED = "what decides its inputs (the cache's model, revision, granularity, pooling, max length"


@pytest.mark.parametrize("edit", [
    lambda m: m["cache"].update(pooling="last", max_length=8),  # it tagged otherwise, exit 0, no word
    lambda m: m["cache"].update(granularity="token"),
    lambda m: m["cache"].update(special_tokens=True),
    lambda m: m["cache"].update(model="bert-base-cased", model_revision="another"),
    lambda m: m.update(config={"mode": "ft"}, backbone_path="elsewhere"),  # the FT check skipped, or made up
])
def test_a_head_whose_inputs_were_edited_is_refused(checkpoint, tmp_path, edit):
    """What decides the states the head is fed is in a checksum of its own: predict and export took an edited
    pooling, length, granularity, model or mode from the JSON and tagged otherwise in silence. A head written
    before that checksum (none in its JSON) still loads, as does one moved to another folder."""
    edited = _copied_head(checkpoint, tmp_path)  # moved: nothing in the hash names a folder
    assert CliRunner().invoke(main, ["--head", edited, "--text", "Alice"]).exit_code == 0
    for result in _edited_then_used(edited, edit, tmp_path / "model"):
        assert result.exit_code == 1 and INPUTS_EDITED in result.stderr, result.output
        assert str(tmp_path / "edited.json") in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "model").exists()


def test_a_head_written_before_the_inputs_checksum_still_loads(checkpoint, tmp_path):
    import shutil

    from layerfuse.training.checkpoint import INPUTS_CHECKSUM

    stem, *_ = checkpoint
    for ext in (".safetensors", ".json"):
        shutil.copy(stem + ext, tmp_path / f"old{ext}")
    meta = json.loads((tmp_path / "old.json").read_text())
    del meta[INPUTS_CHECKSUM]
    (tmp_path / "old.json").write_text(json.dumps(meta))
    result = CliRunner().invoke(main, ["--head", str(tmp_path / "old"), "--text", "Alice met Bob ."])
    assert result.exit_code == 0 and not result.stderr, result.output


def test_conll_out_never_writes_over_its_inputs(checkpoint, tmp_path):
    import shutil

    stem, entry, *_ = checkpoint
    for ext in (".safetensors", ".json"):
        shutil.copy(stem + ext, tmp_path / f"head{ext}")
    data = tmp_path / "dev.txt"
    data.write_text("Alice B-PER\nmet O\n\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    for out in ("head.json", "head.safetensors", "dev.txt"):
        result = CliRunner().invoke(main, ["--head", str(tmp_path / "head"), "--conll", str(data),
                                           "--out", str(tmp_path / out)])
        assert result.exit_code == 2 and "is one of this command's inputs" in result.stderr, result.output
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_conll_out_on_a_full_disk_keeps_the_last_file(checkpoint, tmp_path, monkeypatch):
    """--out was written in place: a full disk left it cut, the user's last predictions lost, and the
    error named no file."""
    import errno

    stem, *_ = checkpoint
    data = tmp_path / "dev.txt"
    data.write_text("Alice B-PER\nmet O\n\n")
    (tmp_path / "pred.txt").write_text("the last predictions\n")

    def full(path, mode="r", **kwargs):
        with open(path, "wb") as f:  # the builtin: a cut file, then the error
            f.write(b"Alice B-PER")
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("layerfuse.files.open", full, raising=False)
    result = CliRunner().invoke(main, ["--head", stem, "--conll", str(data), "--out", str(tmp_path / "pred.txt")])
    assert result.exit_code == 1 and str(tmp_path / "pred.txt") in result.stderr, result.output
    assert (tmp_path / "pred.txt").read_text() == "the last predictions\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.txt", "pred.txt"]


def test_json_lines_answer_the_file_line_by_line(checkpoint, tmp_path):
    # blank lines were dropped, so output line k no longer answered input line k
    stem, *_ = checkpoint
    sentences = tmp_path / "s.txt"
    sentences.write_text("Alice met Bob .\n\n   \nBob went to Paris .\n")
    out = CliRunner().invoke(main, ["--head", stem, "--json", "--file", str(sentences)])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["text"] for r in rows] == ["Alice met Bob .", "", "   ", "Bob went to Paris ."]
    assert rows[1] == {"text": "", "words": [], "tags": [], "entities": []}
    alone = CliRunner().invoke(main, ["--head", stem, "--json", "--text", "Bob went to Paris ."])
    assert json.loads(alone.stdout) == rows[3]  # the blank lines change nothing around them
    # A file longer than a block is tagged and printed block by block: still a line for each, in order.
    from layerfuse.cli.predict import LINES_PER_BLOCK

    many = [f"Alice met Bob {i} ." if i % 7 else "" for i in range(LINES_PER_BLOCK + 40)]
    sentences.write_text("\n".join(many) + "\n")
    out = CliRunner().invoke(main, ["--head", stem, "--json", "--file", str(sentences)])
    assert [json.loads(line)["text"] for line in out.stdout.splitlines()] == many


def test_files_lose_their_byte_order_mark_and_several_are_read_in_order(checkpoint, tmp_path):
    """A file saved with a BOM made its first word '\ufeffAlice'; a second --file silently replaced the first."""
    stem, *_ = checkpoint
    (tmp_path / "a.txt").write_text("\ufeffAlice met Bob .\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("\ufeffBob went to Paris .\n", encoding="utf-8")
    out = CliRunner().invoke(main, ["--head", stem, "--json", "--file", str(tmp_path / "a.txt"),
                                    "--file", str(tmp_path / "b.txt")])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["text"] for r in rows] == ["Alice met Bob .", "Bob went to Paris ."]
    assert rows[0]["words"][0] == "Alice"


def test_a_bad_byte_in_a_file_to_tag_is_named_at_its_line(checkpoint, tmp_path):
    """`predict --file` named the byte's offset in the decoder's read-ahead block (1276 for line 2501), no line."""
    stem, *_ = checkpoint
    lines = [b"Angela Merkel visited Paris ."] * 3000
    lines[2500] = b"abc \xff def"
    (tmp_path / "bad.txt").write_bytes(b"\n".join(lines) + b"\n")
    out = CliRunner().invoke(main, ["--head", stem, "--file", str(tmp_path / "bad.txt")])
    assert out.exit_code == 1 and out.output.strip().endswith("bad.txt:2501: not UTF-8 text (byte 0xff at column 5)")


def test_predict_takes_quiet_as_every_command_does(checkpoint, tmp_path, monkeypatch):
    """predict drew its bar on a terminal whatever was asked, and refused --quiet (`No such option`)."""
    stem, *_ = checkpoint
    (tmp_path / "s.txt").write_text("Alice met Bob .\n" * 3)
    monkeypatch.setattr("layerfuse.cli.progress.stderr_is_terminal", lambda: True)
    args = ["--head", stem, "--file", str(tmp_path / "s.txt")]
    shown, quiet = (CliRunner().invoke(main, [*args, *extra]) for extra in ([], ["--quiet"]))
    assert shown.exit_code == quiet.exit_code == 0, quiet.output
    assert "predict:" in shown.stderr and "predict:" not in quiet.stderr
    assert shown.stdout == quiet.stdout


def test_tag_refuses_a_string_for_a_sentence(checkpoint):
    """Predictor.tag(["EU rejects German call"]) tagged each character: 22 tags for 4 words."""
    from layerfuse.errors import LayerfuseError
    from layerfuse.inference import Predictor

    tagger = Predictor(checkpoint[0])
    with pytest.raises(LayerfuseError, match="takes sentences as lists of words"):
        tagger.tag(["EU rejects German call"])
    assert len(tagger.tag([["EU", "rejects", "German", "call"]])[0]) == 4
    assert tagger.tag([[]]) == [[]] and tagger.tag([[], []]) == [[], []]  # it failed deep in the backbone
    assert tagger.tag([[], ["EU"]])[0] == [] and len(tagger.tag([[], ["EU"]])[1]) == 1


def test_tag_reads_sentences_in_order_whatever_their_container(checkpoint):
    """A pandas column filtered or sorted (its index no longer 0..n-1) was read by label: one sentence's tags
    went to another in silence (3 tags for 6 words), or a KeyError; a generator was used up by the string
    check, and a numpy array of words failed the emptiness test."""
    import numpy as np
    import pandas as pd

    from layerfuse.inference import Predictor

    tagger = Predictor(checkpoint[0])
    sentences = [["Alice", "met", "Bob"], ["Paris"], ["Apple", "shares", "fell", "on", "Monday", "."]]
    expected = tagger.tag(sentences)
    column = pd.DataFrame({"tokens": sentences}).tokens
    assert tagger.tag(column.iloc[[2, 0, 1]]) == [expected[2], expected[0], expected[1]]
    assert tagger.tag(column[column.str.len() > 1]) == [expected[0], expected[2]]
    assert tagger.tag(s for s in sentences) == expected
    assert tagger.tag([np.array(s) for s in sentences]) == expected
    from layerfuse.errors import LayerfuseError

    with pytest.raises(LayerfuseError, match=r"sentence 0 holds \('Alice', 0, 5\), not a word"):
        tagger.tag([tagger.words("Alice met Bob")])  # (word, start, end): a tokenizer's TypeError


def test_tag_batches_hold_a_bounded_number_of_padded_words():
    """`Predictor.tag` batched 32 sentences in file order: one very long sentence padded the others to
    its length ([B, T, L, d] grew with the longest sentence times the batch)."""
    from layerfuse.inference.predictor import _batches

    lengths = [10] * 40 + [5000] + [3] * 5
    batches = _batches(lengths, 32, rows=8192)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))  # each sentence once
    assert all(len(b) <= 32 and len(b) * max(lengths[i] for i in b) <= 8192 or len(b) == 1 for b in batches)
    assert [40] in batches  # the long one alone
    assert _batches([9000], 32, rows=8192) == [[0]]  # longer than the budget: alone, still tagged


def test_predictor_takes_the_run_record_as_predict_does(tiny_cache, tmp_path):
    """`Predictor("RUN.json")` said "RUN.safetensors does not exist" where `predict --head RUN.json` worked."""
    from layerfuse.cli.train import main as train_head_cli
    from layerfuse.errors import LayerfuseError
    from layerfuse.inference import Predictor

    trained = CliRunner().invoke(train_head_cli, ["--cache", tiny_cache, "--fusion", "base", "--shots", "2",
                                                  "--epochs", "1", "--out", str(tmp_path)])
    assert trained.exit_code == 0, trained.output
    by_record = Predictor(str(tmp_path / "base-n2-e1-s0.json"))
    by_head = Predictor(str(tmp_path / "base-n2-e1-s0.head"))
    words = [["Alice", "met", "Bob"]]
    assert by_record.tag(words) == by_head.tag(words)
    with pytest.raises(LayerfuseError, match="a head is a checkpoint's path or its run record's"):
        Predictor(None)


def test_predict_file_dash_with_stdin_empty_or_closed_says_so(checkpoint):
    """`--file -` with stdin at its end said "pass --text, --file or --fill-mask", --file given; with stdin
    closed (`<&-`), a TypeError traceback."""
    import shlex
    import subprocess
    import sys

    from cli_output import one_error_line

    from layerfuse.cli.predict import main

    empty = one_error_line(CliRunner().invoke(main, ["--head", checkpoint[0], "--file", "-"], input=""))
    assert empty == "error: nothing to tag: --file - holds no line"
    command = shlex.join([sys.executable, "-m", "layerfuse", "predict", "--head", checkpoint[0], "--file", "-"])
    closed = subprocess.run(f"{command} <&-", shell=True, capture_output=True, text=True, timeout=300)
    assert closed.returncode == 1 and closed.stderr.strip().splitlines()[-1] == "error: --file -: stdin is closed"


def test_a_long_text_goes_through_the_backbone_within_the_token_budget(checkpoint, monkeypatch):
    """A whole chapter as one text went through the backbone in one forward pass, every window of it at
    once: memory grew with the text. Its windows now go a budget of tokens at a time (extraction's), and a
    long sentence is tagged a slice of rows at a time, with the tags of the text encoded whole."""
    from layerfuse.extract.entry import default_token_budget
    from layerfuse.inference import Predictor
    from layerfuse.inference import predictor as module

    stem, entry, *_ = checkpoint
    text = " ".join(w for words in entry.split("dev").words() * 5 for w in words)
    tagger = Predictor(stem, device="cpu")
    words = [w for w, _, _ in tagger.words(text)]
    short = ["Alice", "met", "Bob", "in", "Paris", "."]
    assert len(words) > 1500  # hundreds of windows of the tiny BERT
    budget = default_token_budget(torch.device("cpu"))

    tokens: list[int] = []
    forward = tagger.backbone.model.forward

    def counted(*args, **kwargs):
        tokens.append(kwargs["input_ids"].numel())
        return forward(*args, **kwargs)

    monkeypatch.setattr(tagger.backbone.model, "forward", counted)
    monkeypatch.setattr(module, "ROWS_PER_BATCH", 256)  # slices of the long sentence, each a few windows
    batched = tagger.tag([words]) + tagger.tag([words, short])  # alone, and in a batch with another
    assert len(tokens) > 2 and max(tokens) <= budget, (len(tokens), max(tokens))

    tokens.clear()
    monkeypatch.setattr(module, "ROWS_PER_BATCH", 1 << 30)
    tagger.backbone.encoder.token_budget = 1 << 30
    whole = tagger.tag([words]) + tagger.tag([words, short])
    assert max(tokens) > budget  # the reference did encode the text at once
    assert batched == whole and len(batched[0]) == len(words)
