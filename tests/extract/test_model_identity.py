"""A local model folder is one model whatever its spelling, and another model once its files change:
its entry is named by the folder's real path and keyed by a hash of every byte of its config, weights
and tokenizer; a folder the encoder cannot be read from is one line."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from layerfuse.errors import LayerfuseError
from layerfuse.extract.models import legacy_fingerprint, load_tokenizer, model_info, revision_matches
from layerfuse.extract.run import ExtractConfig, describe


def _copy(tiny_bert_dir, tmp_path, name="m"):
    folder = tmp_path / name
    shutil.copytree(tiny_bert_dir, folder)
    return folder


def test_one_folder_spelled_any_way_is_one_entry(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch):
    """`m/x`, `./m/x/`, its absolute path and a link to it made four full extractions, and a relative
    name recorded in a head failed from any other working directory."""
    folder = _copy(tiny_bert_dir, tmp_path / "models")
    os.symlink(folder, tmp_path / "link")
    monkeypatch.chdir(tmp_path)
    spellings = ["models/m", "./models/m/", str(folder), "link"]
    described = [describe(ExtractConfig(model=m, dataset=str(tiny_conll_dir), cache_dir=str(tmp_path / "c")))
                 for m in spellings]
    assert len({path for path, _, _ in described}) == 1
    attrs = described[0][2]
    assert attrs["model"] == "m" and attrs["model_path"] == os.path.realpath(folder)  # loadable from anywhere


def test_weights_or_a_tokenizer_changed_in_place_are_another_revision(tiny_bert_dir, tmp_path):
    """The revision read a weight file's size and its first and last MiB: a retrain that left both ends
    as they were (frozen embeddings, an unused pooler) reused the old entry and ran old heads on the new
    model in silence; tokenizer files were not read at all."""
    folder = _copy(tiny_bert_dir, tmp_path)
    weights = load_file(folder / "model.safetensors")
    pad = {"a.pad": torch.zeros(1 << 19), "z.pad": torch.zeros(1 << 19)}  # 2 MiB each: the weights in between
    save_file({**weights, **pad}, folder / "model.safetensors", metadata={"format": "pt"})
    before, old = model_info(str(folder)).revision, legacy_fingerprint(folder)
    assert before.startswith("content:")
    middle = sorted(weights)[len(weights) // 2]
    weights[middle] = weights[middle] + 1.0  # same size, same first and last MiB
    save_file({**weights, **pad}, folder / "model.safetensors", metadata={"format": "pt"})
    assert legacy_fingerprint(folder) == old  # what the old revision missed
    retrained = model_info(str(folder)).revision
    assert retrained != before
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": False}))
    assert model_info(str(folder)).revision not in (before, retrained)


def test_a_revision_recorded_before_content_hashes_still_matches(tiny_bert_dir, tmp_path):
    """Heads and entries made before folders were hashed whole recorded the legacy fingerprint: the
    same folder is still their model (predict refused them all), another one is not."""
    folder = _copy(tiny_bert_dir, tmp_path)
    info = model_info(str(folder))
    assert revision_matches(info, info.revision)
    assert revision_matches(info, legacy_fingerprint(folder))
    assert not revision_matches(info, "sha256:0123456789abcdef")
    assert not revision_matches(info, "content:0123456789abcdef")


def test_a_folder_without_its_tokenizer_or_with_another_models_is_one_line(tiny_bert_dir, tmp_path):
    """Without tokenizer files transformers built a tokenizer of special tokens only: every word [UNK]
    and a cache of position vectors, exit 0; a tokenizer larger than the embedding matrix failed with an
    IndexError deep in torch."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_bert_dir / name, bare / name)
    with pytest.raises(LayerfuseError, match="holds no tokenizer"):
        load_tokenizer(model_info(str(bare)))
    with pytest.raises(LayerfuseError, match="is a file: name the folder"):  # from_pretrained took the config alone
        model_info(str(bare / "config.json"))
    small = _copy(tiny_bert_dir, tmp_path, "small")
    config = json.loads((small / "config.json").read_text())
    (small / "config.json").write_text(json.dumps({**config, "vocab_size": 10}))
    with pytest.raises(LayerfuseError, match=r"more than the 10 rows of its embedding matrix"):
        load_tokenizer(model_info(str(small)))


def test_an_encoder_decoder_model_is_one_line(tmp_path):
    """BART and T5 failed inside the forward (no hidden_states; decoder inputs wanted), in a traceback."""
    from transformers import BartConfig

    BartConfig(vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
               decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32).save_pretrained(tmp_path)
    with pytest.raises(LayerfuseError, match=r"is an encoder-decoder model \(bart\)"):
        model_info(str(tmp_path))


def test_ls_tells_apart_entries_of_one_folder_and_one_dataset(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """After a model folder or a dataset changed in place, `ls` listed their entries on identical lines."""
    from click.testing import CliRunner

    from layerfuse.cli.main import main
    from layerfuse.extract.run import extract

    folder, data = _copy(tiny_bert_dir, tmp_path), tmp_path / "data"
    shutil.copytree(tiny_conll_dir, data)
    root = tmp_path / "root"

    def run():
        extract(ExtractConfig(model=str(folder), dataset=str(data), cache_dir=str(root), splits=("dev",)),
                progress=False, log=lambda m: None)

    run()
    (data / "dev.txt").write_text((data / "dev.txt").read_text().replace("B-PER", "B-ORG", 1))
    run()
    out = CliRunner().invoke(main, ["ls", "--cache-dir", str(root)])
    described = [line for line in out.output.splitlines() if " on data [" in line]
    assert len(described) == 2 and len(set(described)) == 2 and all(" data " in line for line in described)
    assert not any(" revision " in line for line in described)  # the model did not change


def test_an_entry_a_former_release_made_of_the_folder_is_reused(tiny_bert_dir, tiny_conll_dir, tmp_path,
                                                                monkeypatch):
    """Entries of local folders were keyed by the name as typed and a fingerprint of the weights' ends:
    under the new key the unchanged folder was extracted again beside its entry, and a sweep over the old
    entry refused to resume. Found by its options and its former fingerprint, it is used as before."""
    import zarr

    from layerfuse.cache.layout import entry_key, entry_path
    from layerfuse.extract.run import extract

    folder = _copy(tiny_bert_dir, tmp_path / "models")
    for f in folder.iterdir():  # written well before the entry (its stamp has whole seconds)
        os.utime(f, (time.time() - 3600, time.time() - 3600))
    root = tmp_path / "root"
    config = ExtractConfig(model=str(folder), dataset=str(tiny_conll_dir), cache_dir=str(root), splits=("dev",))
    made = extract(config, progress=False, log=lambda m: None).path
    # as the former release would have made it, named `models/m` from tmp_path
    group = zarr.open_group(made, mode="r+")
    attrs = dict(group.attrs)
    fields = {name: attrs[name] for name in ("model", "model_revision", "dataset_fingerprint", "granularity",
                                             "pooling", "dtype", "max_length", "precision")}
    fields.update(model="models/m", model_revision=legacy_fingerprint(folder))
    old_key = entry_key(fields)
    group.attrs.update(model="models/m", model_revision=fields["model_revision"], key=old_key)
    old = entry_path(str(root), model_name="models/m", dataset_name=attrs["dataset"], key=old_key)
    os.rename(made, old)
    monkeypatch.chdir(tmp_path)  # where its name leads to the folder
    said = []
    again = extract(config, progress=False, log=said.append)
    assert again.path == old and all(s.reused for s in again.splits)
    # said, with the way out: the former fingerprint and file times cannot tell a retrain copied in with its times
    assert f"note: reusing {old}, made of {folder} by a former release" in "\n".join(said)
    assert f"`layerfuse rm {old}` extracts it afresh" in "\n".join(said)
    assert [p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")] == [os.path.basename(old)]
    # another folder of the same weights and another tokenizer matches the former fingerprint: not that entry
    twin = _copy(folder, tmp_path, "twin")
    tokenizer = json.loads((twin / "tokenizer_config.json").read_text())
    (twin / "tokenizer_config.json").write_text(json.dumps({**tokenizer, "do_lower_case": False}))
    twin_config = ExtractConfig(model=str(twin), dataset=str(tiny_conll_dir), cache_dir=str(root), splits=("dev",))
    assert extract(twin_config, progress=False, log=lambda m: None).path != old
    # from where its name leads nowhere (a head trained on it would not load): a new entry
    monkeypatch.chdir(tmp_path / "models")
    assert extract(config, progress=False, log=lambda m: None).path == made  # its own key, made anew
    monkeypatch.chdir(tmp_path)
    # a weight file written since the entry was made (a retrain that left the file's ends as they were, which
    # the former fingerprint misses): not that entry
    later = time.time() + 60
    os.utime(folder / "model.safetensors", (later, later))
    assert extract(config, progress=False, log=lambda m: None).path != old
    # once the folder changes, it is another model: a new entry
    (folder / "config.json").write_text((folder / "config.json").read_text().replace("}", ', "x": 1}', 1))
    assert extract(config, progress=False, log=lambda m: None).path != old


def test_a_relative_folder_not_found_here_says_where_it_is_looked_for(tmp_path, monkeypatch):
    """A head of a former release names its folder as typed; from elsewhere the error advised `--model`,
    which `predict` and `export` do not take."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LayerfuseError, match="if it is a folder named relative to where its entry or head was made"):
        model_info("m/mini")


def test_predict_and_export_take_the_folder_where_it_has_moved(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """A head names its backbone's folder by its real path: moved, the head could not be used at all, and
    the error advised an option predict did not have. --model names the new place, checked against the
    revision the head recorded."""
    from click.testing import CliRunner

    from layerfuse.cli.export import main as export
    from layerfuse.cli.predict import main as predict
    from layerfuse.cli.train import main as train

    folder = _copy(tiny_bert_dir, tmp_path)
    out = CliRunner().invoke(train, ["--model", str(folder), "--dataset", str(tiny_conll_dir), "--cache-dir",
                                     str(tmp_path / "root"), "--fusion", "concat", "--epochs", "1", "--out",
                                     str(tmp_path / "runs"), "--quiet"])
    assert out.exit_code == 0, out.output
    run = str(next((tmp_path / "runs").glob("concat-*.json")))
    moved = tmp_path / "moved"
    os.rename(folder, moved)
    gone = CliRunner().invoke(predict, ["--head", run, "--text", "Alice met Bob"])
    assert gone.exit_code == 1 and "which is not here: name its folder (predict, export: --model DIR" in gone.output
    here = CliRunner().invoke(predict, ["--head", run, "--text", "Alice met Bob", "--model", str(moved)])
    assert here.exit_code == 0, here.output
    exported = CliRunner().invoke(export, [run, "--out", str(tmp_path / "exported"), "--model", str(moved)])
    assert exported.exit_code == 0, exported.output
    provenance = json.loads((tmp_path / "exported" / "config.json").read_text())["layerfuse"]
    assert provenance["backbone"] == "moved"  # the folder read, where its name and license come from
    (moved / "config.json").write_text((moved / "config.json").read_text().replace("}", ', "x": 1}', 1))
    other = CliRunner().invoke(predict, ["--head", run, "--text", "Alice met Bob", "--model", str(moved)])
    assert other.exit_code == 1 and "now has revision" in other.output


def test_the_revision_reads_what_loads_and_no_more(tiny_bert_dir, tmp_path):
    """Every *.pt, *.h5 and *.msgpack beside the weights was hashed too (a checkpoint's optimizer.pt is
    twice the model), and remote code was not."""
    folder = _copy(tiny_bert_dir, tmp_path)
    before = model_info(str(folder)).revision
    (folder / "optimizer.pt").write_bytes(b"x" * 1000)
    (folder / "tf_model.h5").write_bytes(b"y" * 1000)
    assert model_info(str(folder)).revision == before
    (folder / "modeling_x.py").write_text("# remote code\n")
    assert model_info(str(folder)).revision != before


def test_a_copy_of_the_folder_at_another_path_shares_its_entries(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """A colleague's copy of the folder, at another path, found other entries than the ones made of the
    original (keyed by the path): the shared cache was extracted again. One name and one content are one
    model; its heads record the copy they were trained with, and load it."""
    from click.testing import CliRunner

    from layerfuse.cli.predict import main as predict
    from layerfuse.cli.train import main as train

    mine, theirs = _copy(tiny_bert_dir, tmp_path / "alice"), _copy(tiny_bert_dir, tmp_path / "bob")
    root = str(tmp_path / "root")
    made = describe(ExtractConfig(model=str(mine), dataset=str(tiny_conll_dir), cache_dir=root))
    found = describe(ExtractConfig(model=str(theirs), dataset=str(tiny_conll_dir), cache_dir=root))
    assert made[0] == found[0] and made[2]["model_path"] != found[2]["model_path"]
    args = ["--dataset", str(tiny_conll_dir), "--cache-dir", root, "--fusion", "concat", "--epochs", "1", "--quiet"]
    assert CliRunner().invoke(train, ["--model", str(mine), *args, "--out", str(tmp_path / "a")]).exit_code == 0
    shutil.rmtree(mine)  # Alice's folder is not on Bob's machine
    out = CliRunner().invoke(train, ["--model", str(theirs), *args, "--out", str(tmp_path / "b")])
    assert out.exit_code == 0 and "extracted" not in out.output, out.output
    run = str(next((tmp_path / "b").glob("concat-*.json")))
    assert CliRunner().invoke(predict, ["--head", run, "--text", "Alice met Bob"]).exit_code == 0


def test_a_renamed_copy_of_the_folder_finds_its_entries(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """A colleague's copy under another folder name was extracted again and a sweep over the shared results
    refused to resume; its content is the model. An exported card names no Hub model for it."""
    from click.testing import CliRunner

    from layerfuse.cli.train import main as train
    from layerfuse.hf.card import hub_model_id

    mine = _copy(tiny_bert_dir, tmp_path, "my-bert")
    renamed = _copy(tiny_bert_dir, tmp_path / "lib", "bert-base-local")
    args = ["--dataset", str(tiny_conll_dir), "--cache-dir", str(tmp_path / "root"), "--fusion", "concat", "--epochs",
            "1", "--quiet"]
    assert CliRunner().invoke(train, ["--model", str(mine), *args, "--out", str(tmp_path / "a")]).exit_code == 0
    out = CliRunner().invoke(train, ["--model", str(renamed), *args, "--out", str(tmp_path / "b")])
    assert out.exit_code == 0 and "extracted" not in out.output, out.output  # the entry of the same key
    assert hub_model_id("my-bert", model_info(str(mine)).revision) is None  # not https://huggingface.co/my-bert


def test_a_head_whose_folder_is_gone_never_takes_one_of_its_name_here(tiny_bert_dir, tmp_path, monkeypatch):
    """With the recorded folder gone, a folder of the same name in the working directory was loaded (and
    refused only by its revision, in a message that named neither)."""
    from layerfuse.extract.models import model_source

    folder = _copy(tiny_bert_dir, tmp_path, "my-bert")
    monkeypatch.chdir(tmp_path)
    meta = {"model": "my-bert", "model_path": str(tmp_path / "gone" / "my-bert")}
    with pytest.raises(LayerfuseError, match=r"read from .*gone/my-bert, which is not here: name its folder"):
        model_source(meta)
    assert model_source(meta, str(folder)) == str(folder)
    assert model_source({"model": "my-bert"}) == "my-bert"  # a head of a former release: its name, as before


def test_extract_finds_the_entry_of_a_renamed_copy_and_a_sweep_records_the_folder_it_was_given(
        tiny_bert_dir, tiny_conll_dir, tmp_path):
    """`extract` of a renamed copy made a second entry (only train-head looked further); a sweep's workers
    opened the entry from its path, so its kept heads recorded the folder the entry was first made of."""
    from click.testing import CliRunner

    from layerfuse.cli.sweep import main as sweep
    from layerfuse.extract.run import extract

    mine, renamed = _copy(tiny_bert_dir, tmp_path, "mine"), _copy(tiny_bert_dir, tmp_path / "lib", "renamed")
    root = str(tmp_path / "root")
    made = extract(ExtractConfig(model=str(mine), dataset=str(tiny_conll_dir), cache_dir=root), progress=False,
                   log=lambda m: None)
    again = extract(ExtractConfig(model=str(renamed), dataset=str(tiny_conll_dir), cache_dir=root), progress=False,
                    log=lambda m: None)
    assert again.path == made.path and all(s.reused for s in again.splits)
    out = CliRunner().invoke(sweep, ["--model", str(renamed), "--dataset", str(tiny_conll_dir), "--cache-dir", root,
                                     "--fusions", "concat", "--shots", "2", "--epochs", "1", "--trials", "1",
                                     "--workers", "1", "--keep-heads", "all", "--quiet", "--out", str(tmp_path / "sw")])
    assert out.exit_code == 0, out.output
    [head] = (tmp_path / "sw" / "heads").glob("*.head.json")
    assert json.loads(head.read_text())["cache"]["model_path"] == str(renamed)


def test_an_entry_of_the_folder_an_earlier_release_keyed_otherwise_is_reused(tiny_bert_dir, tiny_conll_dir,
                                                                             tmp_path):
    """Releases that hashed the folder's content still keyed its name too: under today's key `extract` made a
    second entry beside theirs, and a sweep over the first then refused to resume."""
    import zarr

    from layerfuse.extract.run import extract

    folder = _copy(tiny_bert_dir, tmp_path / "models")
    root = tmp_path / "root"
    config = ExtractConfig(model=str(folder), dataset=str(tiny_conll_dir), cache_dir=str(root), splits=("dev",))
    made = extract(config, progress=False, log=lambda m: None).path
    other_key = "0123456789abcdef"
    zarr.open_group(made, mode="r+").attrs.update(key=other_key)
    earlier = made.rsplit("__", 1)[0] + "__" + other_key
    os.rename(made, earlier)
    again = extract(config, progress=False, log=lambda m: None)
    assert again.path == earlier and all(s.reused for s in again.splits)
    assert zarr.open_group(earlier, mode="r").attrs["key"] == other_key
    assert [p.name for p in root.iterdir() if p.is_dir()] == [os.path.basename(earlier)]
    # other options are another entry
    assert extract(ExtractConfig(model=str(folder), dataset=str(tiny_conll_dir), cache_dir=str(root), splits=("dev",),
                                 dtype="float32"), progress=False, log=lambda m: None).path != earlier


def test_a_head_saved_without_its_folder_loads_the_one_its_entry_records(tiny_cache, tmp_path, monkeypatch):
    """Heads saved before they recorded their backbone's folder (``model_path``) named it by its folder's name
    alone, looked for in the working folder and then the hub: predict and export said it had moved."""
    from click.testing import CliRunner

    from layerfuse.cli.predict import main as predict
    from layerfuse.cli.train import main as train

    out = CliRunner().invoke(train, ["--cache", tiny_cache, "--fusion", "concat", "--shots", "2", "--epochs", "1",
                                     "--out", str(tmp_path / "runs"), "--quiet"])
    assert out.exit_code == 0, out.output
    head = next((tmp_path / "runs").glob("*.head.json"))
    record = json.loads(head.read_text())
    del record["cache"]["model_path"]  # as an earlier release saved it
    head.write_text(json.dumps(record))
    monkeypatch.chdir(tmp_path)
    tagged = CliRunner().invoke(predict, ["--head", str(head), "--text", "Alice met Bob"])
    assert tagged.exit_code == 0, tagged.output
