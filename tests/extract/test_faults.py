"""Faults during extraction end in one clear line, leave the entry incomplete (never read), and a
rerun resumes it."""

from __future__ import annotations

import errno
from contextlib import contextmanager

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from layerfuse.cache.reader import open_entry
from layerfuse.cli.extract import main
from layerfuse.errors import IncompleteEntryError


def test_disk_full_mid_write_then_resume(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch):
    import layerfuse.cache.shard as shard

    original = shard._write_file  # where every shard of `hidden` goes to disk on a local root
    shard_writes = {"n": 0}

    def filling_up(path, out, size, **options):
        assert "/hidden/c/" in str(path)
        shard_writes["n"] += 1
        if shard_writes["n"] > 2:  # the disk fills after two shards
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return original(path, out, size, **options)

    monkeypatch.setattr(shard, "_write_file", filling_up)
    args = ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir), "--cache-dir", str(tmp_path),
            "--unit-rows", "256", "--splits", "train", "--quiet"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 1
    errors = [line for line in out.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "/hidden/c/" in errors[0]
    assert "Traceback" not in out.output
    path = next(p for p in tmp_path.iterdir() if p.is_dir())
    done = zarr.open_group(str(path), mode="r")["train"]["done"][:]
    assert 0 < done.sum() < len(done)
    with pytest.raises(IncompleteEntryError):
        open_entry(str(path)).split("train")

    monkeypatch.setattr(shard, "_write_file", original)  # space freed
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    split = open_entry(str(path)).split("train")
    assert split.n_rows == 1116 and np.all(np.abs(split.hidden(layers=[2]).astype(np.float32)).sum(-1) > 0)


@contextmanager
def _disk_full_after(shards: int):
    """The disk fills once ``shards`` shards of ``hidden`` are written; space is free again after the block."""
    import layerfuse.cache.shard as shard

    original, writes = shard._write_file, {"n": 0}

    def filling_up(path, out, size, **options):
        writes["n"] += 1
        if writes["n"] > shards:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return original(path, out, size, **options)

    shard._write_file = filling_up
    try:
        yield
    finally:
        shard._write_file = original


def test_a_resume_with_another_token_budget_starts_the_split_again_and_says_so(tiny_bert_dir, tiny_conll_dir,
                                                                                tmp_path):
    """A split started with a too-large --token-budget kept it on every resume: the corrected flag was
    ignored without a word, and the same out-of-memory came back until `rm`."""
    args = ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir), "--cache-dir", str(tmp_path),
            "--unit-rows", "256", "--splits", "train", "--quiet"]
    with _disk_full_after(1):
        assert CliRunner().invoke(main, [*args, "--token-budget", "512"]).exit_code == 1  # one unit written
    again = CliRunner().invoke(main, [*args, "--token-budget", "256"])
    assert again.exit_code == 0, again.output
    assert "train: --token-budget 256, not the 512 it was started with: starting it again" in again.output
    assert "resuming train" not in again.output
    path = next(p for p in tmp_path.iterdir() if p.is_dir())
    assert zarr.open_group(str(path), mode="r")["train"].attrs["token_budget"] == 256


def test_a_shard_lost_after_its_unit_was_flagged_is_written_again(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """An object store lost a shard (or it was deleted) between the run that flagged its unit and the
    resume: the resume trusted the flag and finished the split with those rows all zeros, and `verify`
    passed. Now the resume writes the unit again, and the entry equals one never interrupted."""
    from layerfuse.cache.manage import verify

    args = ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir), "--unit-rows", "256", "--splits",
            "train", "--quiet"]
    assert CliRunner().invoke(main, [*args, "--cache-dir", str(tmp_path / "ref")]).exit_code == 0
    with _disk_full_after(2):
        assert CliRunner().invoke(main, [*args, "--cache-dir", str(tmp_path / "c")]).exit_code == 1  # two units
    path = next(p for p in (tmp_path / "c").iterdir() if p.is_dir())
    (path / "train" / "hidden" / "c" / "0" / "0" / "0").unlink()  # lost after its unit was flagged
    again = CliRunner().invoke(main, [*args, "--cache-dir", str(tmp_path / "c")])
    assert again.exit_code == 0, again.output
    assert "resuming train: 1 of 5 units already cached" in again.output
    ref = next(p for p in (tmp_path / "ref").iterdir() if p.is_dir())
    np.testing.assert_array_equal(open_entry(str(path)).split("train").hidden(),
                                  open_entry(str(ref)).split("train").hidden())
    assert verify(str(path)) == []


def test_verify_finds_a_shard_a_finished_split_never_recorded(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """A split finished by an older version with a hole (its record lists what was there, not what the
    plan wrote): `verify` names the missing shard from the array's own grid."""
    from layerfuse.cache.manage import verify

    args = ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir), "--unit-rows", "256", "--splits",
            "train", "--quiet", "--cache-dir", str(tmp_path)]
    assert CliRunner().invoke(main, args).exit_code == 0
    path = next(p for p in tmp_path.iterdir() if p.is_dir())
    (path / "train" / "hidden" / "c" / "2" / "0" / "0").unlink()
    split = zarr.open_group(str(path / "train"), mode="r+")
    files = dict(split.attrs["files"])
    files["hidden"] = [k for k in files["hidden"] if k != "c/2/0/0"]
    split.attrs["files"] = files
    assert any("array train/hidden, chunk c/2/0/0 is missing" in p for p in verify(str(path)))
