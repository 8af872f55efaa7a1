"""Finding an entry from --model/--dataset: one made with another forward precision or storage dtype
is used instead of extracting again; one that differs in what a head sees is named, not replaced."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from layerfuse.cache.manage import list_entries
from layerfuse.cli.main import main as cli
from layerfuse.cli.train import main as train_head
from layerfuse.errors import LayerfuseError
from layerfuse.experiments import resolve_entry
from layerfuse.extract.run import ExtractConfig, extract


def _extract(root, model, data, **options) -> str:
    config = ExtractConfig(model=str(model), dataset=str(data), cache_dir=str(root), **options)
    return extract(config, progress=False, log=lambda m: None).path


def _entries(root) -> list[str]:
    return sorted(n for n in os.listdir(root) if os.path.isfile(os.path.join(root, n, "zarr.json")))


@pytest.fixture(scope="module")
def bf16_root(tmp_path_factory, tiny_bert_dir, tiny_conll_dir):
    """A root holding one entry, extracted with a bf16 forward pass."""
    root = tmp_path_factory.mktemp("bf16")
    _extract(root, tiny_bert_dir, tiny_conll_dir, precision="bf16")
    return root


@pytest.mark.parametrize("made", [{"precision": "bf16"}, {"dtype": "float32"}])
def test_train_head_uses_the_entry_made_otherwise(tmp_path, tiny_bert_dir, tiny_conll_dir, made):
    made_path = _extract(tmp_path, tiny_bert_dir, tiny_conll_dir, **made)
    result = CliRunner().invoke(train_head, ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir),
                                             "--cache-dir", str(tmp_path), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert _entries(tmp_path) == [os.path.basename(made_path)]  # nothing extracted beside it
    name, value = next(iter(made.items()))
    note = [line for line in result.stderr.splitlines() if line.startswith("using")]
    assert len(note) == 1 and made_path in note[0] and f"only in {name}" in note[0] and value in note[0]


def test_the_newest_of_two_is_used(bf16_root, tmp_path, tiny_bert_dir, tiny_conll_dir):
    import shutil

    import zarr

    root = tmp_path / "root"
    shutil.copytree(bf16_root, root)
    for name in _entries(root):  # finish times have one-second steps: make the copied entry plainly older
        group = zarr.open_group(str(root / name), mode="r+")
        for split in group.group_keys():
            group[split].attrs["finished"] = "2000-01-01T00:00:00+0000"
    newer = _extract(root, tiny_bert_dir, tiny_conll_dir, dtype="float32")
    notes = []
    entry = resolve_entry(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(root),
                          log=notes.append)
    assert entry.path == newer and len(_entries(root)) == 2
    assert len(notes) == 1 and "the newest of 2" in notes[0]


def test_an_explicit_option_is_not_relaxed(tmp_path, bf16_root, tiny_bert_dir, tiny_conll_dir):
    import shutil

    root = tmp_path / "root"
    shutil.copytree(bf16_root, root)
    entry = resolve_entry(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(root),
                          extract_options={"precision": "fp32"}, log=lambda m: None)
    assert entry.meta["precision"] == "fp32" and len(_entries(root)) == 2


def test_an_exact_entry_wins(tmp_path, bf16_root, tiny_bert_dir, tiny_conll_dir):
    import shutil

    root = tmp_path / "root"
    shutil.copytree(bf16_root, root)
    exact = _extract(root, tiny_bert_dir, tiny_conll_dir)
    notes = []
    entry = resolve_entry(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(root),
                          log=notes.append)
    assert entry.path == exact and notes == []


@pytest.mark.parametrize("made, shown", [
    ({"granularity": "subword"}, "granularity subword"),
    ({"pooling": "mean"}, "pooling mean"),
    ({"max_length": 16}, "max_length 16"),
])
def test_an_entry_a_head_sees_differently_is_named_not_replaced(tmp_path, tiny_bert_dir, tiny_conll_dir, made,
                                                                 shown):
    other = _extract(tmp_path, tiny_bert_dir, tiny_conll_dir, **made)
    with pytest.raises(LayerfuseError, match="--cache PATH") as err:
        resolve_entry(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path),
                      log=lambda m: None)
    assert f"{other} ({shown}" in str(err.value) and "\n" not in str(err.value)
    assert _entries(tmp_path) == [os.path.basename(other)]
    result = CliRunner().invoke(train_head, ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir),
                                             "--cache-dir", str(tmp_path), "--dry-run"])
    assert result.exit_code == 1 and result.stderr.startswith("error:") and other in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and _entries(tmp_path) == [os.path.basename(other)]


def test_an_explicitly_different_request_extracts(tmp_path, tiny_bert_dir, tiny_conll_dir):
    _extract(tmp_path, tiny_bert_dir, tiny_conll_dir, granularity="subword")
    entry = resolve_entry(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path),
                          extract_options={"granularity": "word"}, log=lambda m: None)
    assert entry.meta["granularity"] == "word" and len(_entries(tmp_path)) == 2


def test_another_dataset_does_not_count(tmp_path, bf16_root, tiny_bert_dir, tiny_conll_dir, tmp_path_factory):
    import shutil

    other_data = tmp_path_factory.mktemp("other_conll")
    for name in ("train", "dev", "test"):
        text = (tiny_conll_dir / f"{name}.txt").read_text()
        (other_data / f"{name}.txt").write_text(text.replace("Alice", "Alicia"))
    root = tmp_path / "root"
    shutil.copytree(bf16_root, root)
    entry = resolve_entry(model=str(tiny_bert_dir), dataset=str(other_data), cache_dir=str(root), log=lambda m: None)
    assert entry.meta["precision"] == "fp32" and len(_entries(root)) == 2


def test_ls_and_info_tell_entries_apart(tmp_path, tiny_bert_dir, tiny_conll_dir):
    plain = _extract(tmp_path, tiny_bert_dir, tiny_conll_dir)
    bf16 = _extract(tmp_path, tiny_bert_dir, tiny_conll_dir, precision="bf16", dtype="float32")
    sub = _extract(tmp_path, tiny_bert_dir, tiny_conll_dir, granularity="subword", max_length=16)
    assert {e.path for e in list_entries(str(tmp_path))} == {plain, bf16, sub}
    runner = CliRunner()
    ls = runner.invoke(cli, ["ls", "--cache-dir", str(tmp_path)])
    assert ls.exit_code == 0, ls.output
    labels = {line.split("\n")[0]: line for line in ls.output.split(f"{tmp_path}/")[1:]}
    by_path = {os.path.join(str(tmp_path), k.strip()): v for k, v in labels.items()}
    assert "[word/first float16 fp32-forward max 32]" in by_path[plain]
    assert "[word/first float32 bf16-forward max 32]" in by_path[bf16]
    assert "[subword float16 fp32-forward max 16]" in by_path[sub]
    info = runner.invoke(cli, ["info", bf16])
    assert info.exit_code == 0, info.output
    assert "float32, forward bf16, max length 32" in info.output
    assert f"variant    {plain} (dtype float16, precision fp32)" in info.output
    assert f"variant    {sub} (granularity subword, pooling none, dtype float16, precision fp32, max_length 16)" \
        in info.output


def test_mlm_masking_options_must_match(tmp_path, tmp_path_factory, tiny_bert_dir):
    from conftest import make_sentences

    corpus = tmp_path_factory.mktemp("corpus")
    for split, seed in (("train", 5), ("dev", 6), ("test", 7)):
        sentences = make_sentences(24, seed=seed)
        (corpus / f"{split}.txt").write_text("\n\n".join(" ".join(w) + " ." for w, _ in sentences) + "\n")
    made = _extract(tmp_path, tiny_bert_dir, corpus, task="mlm", block_size=16, precision="bf16")
    mlm = {"task": "mlm", "block_size": 16, "mask_seed": 0, "mlm_probability": 0.15}
    notes = []
    entry = resolve_entry(model=str(tiny_bert_dir), dataset=str(corpus), cache_dir=str(tmp_path), extract_options=mlm,
                          log=notes.append)
    assert entry.path == made and len(notes) == 1 and "only in precision" in notes[0]
    other = resolve_entry(model=str(tiny_bert_dir), dataset=str(corpus), cache_dir=str(tmp_path),
                          extract_options={**mlm, "mask_seed": 1}, log=lambda m: None)
    assert other.path != made and other.meta["mask_seed"] == 1 and len(_entries(tmp_path)) == 2


def test_newest_is_by_time_not_by_the_text_of_the_stamp(tmp_path, tiny_bert_dir, tiny_conll_dir):
    """Stamps carry their writer's offset: compared as text, 01:43-05:00 (06:43 UTC) sorted before 03:00+00:00."""
    import zarr

    older, newer = (_extract(tmp_path / name, tiny_bert_dir, tiny_conll_dir) for name in ("a", "b"))
    for path, stamp in ((older, "2026-11-28T03:00:00+0000"), (newer, "2026-11-28T01:43:09-0500")):
        group = zarr.open_group(path, mode="r+")
        for split in group.group_keys():
            group[split].attrs["finished"] = stamp
    root = tmp_path / "both"
    root.mkdir()
    for path in (older, newer):
        os.rename(path, root / os.path.basename(os.path.dirname(path)))
    assert [os.path.basename(e.path) for e in list_entries(str(root))] == ["b", "a"]


def test_a_renamed_entry_of_the_same_options_is_used_and_said_plainly(tmp_path, tiny_bert_dir, tiny_conll_dir):
    """A folder renamed (my_entry): the note read "using the  entry ... differs ... only in , so"; and an
    entry made otherwise, if newer, was preferred to the one made with the very options asked for."""
    import shutil

    made = _extract(tmp_path / "made", tiny_bert_dir, tiny_conll_dir)
    root = tmp_path / "root"
    root.mkdir()
    shutil.copytree(made, root / "my_entry")
    _extract(root, tiny_bert_dir, tiny_conll_dir, dtype="float32")  # newer, and made otherwise
    assert not (root / os.path.basename(made)).exists()  # no entry under its own name: it must be found
    notes = []
    entry = resolve_entry(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(root), log=notes.append)
    assert entry.path == str(root / "my_entry")
    assert notes == [f"using the entry {root / 'my_entry'} made {list_entries(str(root))[-1].finished}: it was made "
                     "with these options (its folder is named otherwise)"]


def test_a_read_only_root_is_read_as_it_is_without_the_sets_it_lacks(tmp_path, tiny_bert_dir, tiny_conll_dir,
                                                                     monkeypatch):
    """An entry of a shared read-only root made from the words and NER tags alone, and a user's files of the
    same words that carry POS and chunk columns too: train-head on it stopped at "the root is read-only" to
    store sets its run never reads. It now reads what is stored; a run on a set the entry lacks says so."""
    from layerfuse.cache import label_sets
    from layerfuse.cache.reader import open_entry
    from layerfuse.experiments import find

    made = _extract(tmp_path, tiny_bert_dir, tiny_conll_dir, columns="word=0,ner=3")
    monkeypatch.setattr(find, "writable", lambda path: False, raising=False)
    common = ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir), "--cache-dir", str(tmp_path),
              "--fusion", "base", "--shots", "2", "--epochs", "1", "--quiet"]
    result = CliRunner().invoke(train_head, [*common, "--out", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    assert "not stored (its root is read-only)" in result.stderr
    assert set(label_sets.listed(open_entry(made).stored_meta)) == {"ner"}  # nothing written
    pos = CliRunner().invoke(train_head, [*common, "--labels", "pos", "--out", str(tmp_path / "pos")])
    assert pos.exit_code == 2 and "has the label sets ner (add one with `extract ... --labels pos`" in pos.output
