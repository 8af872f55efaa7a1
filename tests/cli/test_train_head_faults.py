"""`train-head` and `sweep` outputs checked before the work, and what an interrupted `train-head` says:
a `--out` that is a file or read-only is one line before any training (it once trained, then died in a
32-line SafetensorError or a terse "File exists"); a head that cannot be written at the end is saved
elsewhere and the line says where; Ctrl-C says the truth (the head is not resumed: it starts over)."""

from __future__ import annotations

import os

import pytest
from cli_output import one_error_line
from click.testing import CliRunner

from layerfuse.cli.main import main


def _train_head(entry: str, out) -> list[str]:
    return ["train-head", "--cache", entry, "--fusion", "concat", "--shots", "2", "--epochs", "1", "--quiet",
            "--out", str(out)]


def _private_tmp(tmp_path, monkeypatch) -> None:
    """The system's temporary folder, where a head that cannot be saved in --out goes: tmp_path/tmp."""
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)


def test_ctrl_c_in_train_head_does_not_promise_a_resume(tiny_cache, tmp_path, monkeypatch):
    from layerfuse.training import loop

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "train_head", interrupted)
    out = CliRunner().invoke(main, _train_head(tiny_cache, tmp_path / "runs"))
    assert out.exit_code == 130
    assert "resume" not in out.output and "from the start" in out.output
    assert not os.path.exists(tmp_path / "runs") or os.listdir(tmp_path / "runs") == []


def _no_training(monkeypatch):
    """Training would be the work the check must come before: any call to it fails the test."""
    from layerfuse.training import loop

    def trained(*args, **kwargs):
        raise AssertionError("trained before the --out check")

    monkeypatch.setattr(loop, "train_head", trained)


def _deny_writes(monkeypatch, path):
    """os.access as an unprivileged user sees ``path`` read-only (tests may run as root)."""
    from layerfuse.cli import roots

    real = os.access
    monkeypatch.setattr(roots.os, "access",
                        lambda p, m: False if os.path.abspath(p) == str(path) and m & os.W_OK else real(p, m))


def test_out_that_is_a_file_or_read_only_is_refused_before_training(tiny_cache, tmp_path, monkeypatch):
    _no_training(monkeypatch)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    line = one_error_line(CliRunner().invoke(main, _train_head(tiny_cache, notes)))
    assert f"--out {notes} is a file, not a folder" in line
    line = one_error_line(CliRunner().invoke(main, _train_head(tiny_cache, notes / "runs")))
    assert f"--out {notes / 'runs'} is a file, not a folder ({notes} is one)" in line
    assert notes.read_text() == "mine"
    locked = tmp_path / "locked"
    locked.mkdir()
    _deny_writes(monkeypatch, locked)
    line = one_error_line(CliRunner().invoke(main, _train_head(tiny_cache, locked)))
    assert f"--out {locked} is read-only" in line
    sweep = ["sweep", "--cache", tiny_cache, "--fusions", "concat", "--shots", "2", "--epochs", "1", "--quiet"]
    assert f"--out {notes} is a file" in one_error_line(CliRunner().invoke(main, [*sweep, "--out", str(notes)]))
    assert f"--out {locked} is read-only" in one_error_line(CliRunner().invoke(main, [*sweep, "--out", str(locked)]))


def test_a_head_that_cannot_be_written_at_the_end_is_saved_elsewhere(tiny_cache, tmp_path, monkeypatch):
    """The folder passes the check, then the write fails (made read-only, or the disk filled, during the
    training): the head is saved in a folder of its own and the one line names it."""
    from layerfuse.training import checkpoint

    runs = tmp_path / "runs"
    real = checkpoint.save_checkpoint

    def failing(path, *args, **kwargs):
        if str(path).startswith(str(runs)):
            raise PermissionError(13, "Permission denied", str(path) + ".safetensors")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save_checkpoint", failing)
    _private_tmp(tmp_path, monkeypatch)
    line = one_error_line(CliRunner().invoke(main, _train_head(tiny_cache, runs)))
    assert f"could not write the head to --out {runs} (Permission denied: {runs}" in line
    (elsewhere,) = os.listdir(tmp_path / "tmp")
    assert str(tmp_path / "tmp" / elsewhere) in line
    saved = sorted(os.listdir(tmp_path / "tmp" / elsewhere))
    assert [f for f in saved if f.endswith(".head.safetensors")] and [f for f in saved if ".head" not in f]



def test_a_save_that_fails_half_way_leaves_nothing_of_it_in_out(tiny_cache, tmp_path, monkeypatch):
    """The head was written, then the disk filled before its record: --out kept the head without a record
    (3.5 MB a full disk needed, loadable as if a run's) while the run was saved elsewhere."""
    import errno

    from layerfuse import files

    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "mine.txt").write_text("the user's own file\n")
    real = files.write_json

    def full(path, *args, **kwargs):
        if str(path).startswith(str(runs)) and not str(path).endswith(".head.json"):  # the run's record
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(files, "write_json", full)
    _private_tmp(tmp_path, monkeypatch)
    line = one_error_line(CliRunner().invoke(main, _train_head(tiny_cache, runs)))
    assert "it is saved in" in line
    assert sorted(p.name for p in runs.iterdir()) == [".layerfuse.lock", "mine.txt"]


def test_a_run_saved_meanwhile_under_the_same_name_is_left_whole(tiny_cache, tmp_path, monkeypatch):
    """Two runs that differ only in --lr share a file name: the one that found the other saved while it
    waited for the folder's lock was refused, and then deleted the other run's head and record as what its
    own failed save had made."""
    import shutil

    from layerfuse import files

    other = tmp_path / "other"
    first = CliRunner().invoke(main, [*_train_head(tiny_cache, other), "--lr", "1e-3"])
    assert first.exit_code == 0, first.output
    runs = tmp_path / "runs"
    real = files.folder_locked

    def saved_meanwhile(folder):  # the other run saves its files while this one waits for the lock
        runs.mkdir(exist_ok=True)
        for p in other.iterdir():
            if p.is_file() and not p.name.startswith("."):
                shutil.copy(p, runs / p.name)
        return real(folder)
    monkeypatch.setattr(files, "folder_locked", saved_meanwhile)
    _private_tmp(tmp_path, monkeypatch)
    line = one_error_line(CliRunner().invoke(main, [*_train_head(tiny_cache, runs), "--lr", "3e-3"]))
    assert "holds another run" in line and "it is saved in" in line
    assert {p.name: p.read_bytes() for p in runs.iterdir() if not p.name.startswith(".")} == \
        {p.name: p.read_bytes() for p in other.iterdir() if not p.name.startswith(".")}


def test_a_diverged_training_saves_no_head_and_fails_in_one_line(tiny_cache, tmp_path):
    """At a huge --lr the loss went nan: train-head exited 0, saved a head predict refused, and its record
    scored like any other run."""
    out = tmp_path / "runs"
    result = CliRunner().invoke(main, [*_train_head(tiny_cache, out), "--epochs", "2", "--lr", "1e20"])
    assert "training diverged (" in one_error_line(result)
    assert "lower --lr than 1e+20" in result.output
    assert not out.exists() or not any(out.iterdir())


def test_a_head_whose_only_dev_loss_went_nan_is_refused_as_diverged(tiny_cache, tmp_path):
    """One step at a huge --lr threw the weights so far that the dev logits overflowed while the loss of that
    step (taken before it) was finite: train-head printed the broken head's F1 as a result, exit 0, and saved
    it with ``"dev_loss": NaN`` in its record."""
    out = tmp_path / "runs"
    result = CliRunner().invoke(main, [*_train_head(tiny_cache, out), "--lr", "1e20"])
    assert "training diverged (dev loss nan at step 1); no head was saved" in one_error_line(result)
    assert not out.exists() or not any(out.iterdir())


def _poison(entry: str, split: str, layer: int, rows) -> None:
    """nan in ``rows`` of one cached ``layer`` of ``split``, written through zarr: the checksums still agree."""
    import numpy as np
    import zarr

    hidden = zarr.open_group(entry, mode="a")[split]["hidden"]
    block = hidden[rows, layer, :]
    block[:] = np.nan
    hidden[rows, layer, :] = block


def test_nan_in_the_cached_dev_features_is_an_error_naming_the_split_not_a_score(entry_copy, tmp_path):
    """One dev row of nan made the dev loss nan: train-head printed its F1 as a result, exit 0, saved the
    head, and wrote ``"dev_loss": NaN`` into its record."""
    _poison(entry_copy, "dev", 2, slice(0, 3))
    out = tmp_path / "runs"
    line = one_error_line(CliRunner().invoke(main, _train_head(entry_copy, out)))
    assert f"split dev of the cache entry {entry_copy} holds nan or inf hidden states (layer 2;" in line
    assert f"layerfuse verify {entry_copy}" in line
    assert not out.exists() or not any(out.iterdir())


def test_nan_in_the_cached_train_features_points_at_the_cache_not_the_learning_rate(entry_copy, tmp_path):
    """Features of nan made the training loss nan: train-head said the training diverged and to try a lower
    --lr, which no rate mends."""
    _poison(entry_copy, "train", 1, slice(None))
    line = one_error_line(CliRunner().invoke(main, _train_head(entry_copy, tmp_path / "runs")))
    assert f"split train of the cache entry {entry_copy} holds nan or inf hidden states (layer 1;" in line
    assert "--lr" not in line and "diverged" not in line


def test_nan_in_the_cached_test_features_is_an_error_naming_the_split(entry_copy, tmp_path):
    """Test is scored once, at the best dev point: a test row of nan gave a test F1 read as valid."""
    _poison(entry_copy, "test", 2, slice(0, 2))
    line = one_error_line(CliRunner().invoke(main, _train_head(entry_copy, tmp_path / "runs")))
    assert f"split test of the cache entry {entry_copy} holds nan or inf hidden states (layer 2;" in line


def test_a_dev_split_without_an_entity_is_refused_before_training(tiny_cache, tmp_path, monkeypatch):
    """The tiny set's chunk column is all O: dev F1 was 0.0 at every evaluation, reported as a real score, and
    the first evaluation was chosen as best. A token set (POS: accuracy) has no entities to miss."""
    pos = CliRunner().invoke(main, [*_train_head(tiny_cache, tmp_path / "pos"), "--labels", "pos"])
    assert pos.exit_code == 0, pos.output
    _no_training(monkeypatch)
    chunk = [*_train_head(tiny_cache, tmp_path / "runs"), "--labels", "chunk", "--shots", "all"]  # train: all O too
    line = one_error_line(CliRunner().invoke(main, chunk))
    assert line == (f"error: the dev split of {tiny_cache} holds no chunk entity: its F1 is undefined, so no "
                    "evaluation can be chosen as best; give a dev split with entities")


def test_a_dev_subset_without_an_entity_is_refused_before_training(entry_copy, tmp_path, monkeypatch):
    """--dev-sentences scores a fixed subset of dev: one without an entity gave every run an F1 of 0.0."""
    import numpy as np
    import zarr

    dev = zarr.open_group(entry_copy, mode="a")["dev"]
    outside = dev["labels"][:]
    offsets = dev["offsets"][:]
    names = list(zarr.open_group(entry_copy, mode="r").attrs["label_names"])
    subset = np.random.default_rng(0).choice(len(offsets) - 1, 5, replace=False)  # as `loop.dev_subset` draws it
    for i in subset:  # its five sentences tagged O: dev keeps the entities of the others
        outside[offsets[i]:offsets[i + 1]] = names.index("O")
    dev["labels"][:] = outside
    _no_training(monkeypatch)
    line = one_error_line(CliRunner().invoke(main, [*_train_head(entry_copy, tmp_path), "--dev-sentences", "5"]))
    assert line.startswith(f"error: the --dev-sentences 5 subset of dev of {entry_copy} holds no ner entity")
    assert line.endswith("or a larger --dev-sentences")


@pytest.mark.parametrize("args, needle", [
    (["--seed", "-5"], "'--seed': -5 is not in the range 0<=x<=4294967295"),  # numpy's traceback before
    (["--seed", "99999999999999999999999"], "is not in the range"),  # torch's overflow before
    (["--device", "bogus"], "--device 'bogus' is not a device"),
    (["--device", "cuda:7"], "--device cuda:7: "),  # no CUDA here, or not 8 GPUs
    (["--layers", ""], "'--layers': is empty"),  # an unset shell variable read as every layer
])
def test_a_bad_seed_device_or_layers_is_one_line(tiny_cache, tmp_path, args, needle):
    result = CliRunner().invoke(main, [*_train_head(tiny_cache, tmp_path), *args])
    assert result.exit_code in (1, 2) and "Traceback" not in result.output and needle in result.output, result.output


def test_another_run_saved_into_out_while_this_one_trained_is_not_replaced(tiny_cache, tmp_path, monkeypatch):
    """Two train-heads into one --out at once (other learning rates, one file name): the one that saves
    second finds the first's record there, leaves it whole, and saves its own head elsewhere (it replaced
    the first's head and record in silence)."""
    import json

    from layerfuse.training import loop

    runs = tmp_path / "runs"
    real = loop.train_head
    other = {"config": {"fusion": "concat", "shots": 2, "epochs": 1, "seed": 0, "lr": 0.5}, "best_dev_f1": 0.25}

    def trained_beside_another(*args, **kwargs):
        result = real(*args, **kwargs)
        runs.mkdir(exist_ok=True)  # the other train-head saved while this one trained
        (runs / "concat-n2-e1-s0.json").write_text(json.dumps(other))
        return result

    monkeypatch.setattr(loop, "train_head", trained_beside_another)
    _private_tmp(tmp_path, monkeypatch)
    line = one_error_line(CliRunner().invoke(main, _train_head(tiny_cache, runs)))
    assert "concat-n2-e1-s0.json holds another run (lr 0.5 there" in line and "saved in" in line
    assert json.loads((runs / "concat-n2-e1-s0.json").read_text()) == other
    assert sorted(os.listdir(runs)) == [".layerfuse.lock", "concat-n2-e1-s0.json"]  # no head of this run there
    (elsewhere,) = os.listdir(tmp_path / "tmp")
    assert "concat-n2-e1-s0.head.safetensors" in os.listdir(tmp_path / "tmp" / elsewhere)


@pytest.mark.parametrize("raised", [MemoryError(), RuntimeError(
    "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1638400000 bytes. Error code 12")])
def test_running_out_of_memory_is_one_line_saying_what_to_lower(tiny_cache, tmp_path, monkeypatch, raised):
    """A batch too large for the machine ended in a 16-frame torch traceback (or MemoryError's)."""
    from layerfuse.training import loop

    def out_of_memory(*args, **kwargs):
        raise raised

    monkeypatch.setattr(loop, "train_head", out_of_memory)
    line = one_error_line(CliRunner().invoke(main, _train_head(tiny_cache, tmp_path / "runs")))
    assert line.startswith("error: out of memory") and "lower --batch-size or --token-budget" in line
    assert ("1638400000 bytes" in line) == isinstance(raised, RuntimeError)


def test_runs_of_other_layer_sets_get_files_of_their_own(tiny_cache, tmp_path):
    """``--layers 0-2`` and ``--layers 0,2`` were both named ``-l0.2``: the second, another run, was refused
    for good in that --out, and a copy to a case-insensitive disk kept one of them."""
    for layers in ("0-2", "0,2"):
        result = CliRunner().invoke(main, ["train-head", "--cache", tiny_cache, "--fusion", "concat", "--shots", "2",
                                           "--epochs", "1", "--layers", layers, "--out", str(tmp_path)])
        assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.glob("*-l*.json") if ".head." not in p.name) == [
        "concat-n2-e1-s0-l0.2.json", "concat-n2-e1-s0-l0_2.json"]


def test_a_run_an_earlier_release_named_as_this_one_is_refused_saying_so(tiny_cache, tmp_path):
    """Earlier releases wrote a range as a list is written now (--layers 0-2 as -l0.2, the name of 0,2): such
    a run is not replaced, and the refusal says why the names meet."""
    def train(layers):
        return CliRunner().invoke(main, ["train-head", "--cache", tiny_cache, "--fusion", "concat", "--shots", "2",
                                         "--epochs", "1", "--layers", layers, "--out", str(tmp_path)])

    assert train("0-2").exit_code == 0
    for end in (".json", ".head.json", ".head.safetensors"):  # as the earlier release named it
        os.rename(tmp_path / f"concat-n2-e1-s0-l0_2{end}", tmp_path / f"concat-n2-e1-s0-l0.2{end}")
    line = one_error_line(train("0,2"))
    assert "holds another run (layers '0-2' there, '0,2' here; named by an earlier release" in line
    assert "now -l0_2" in line
