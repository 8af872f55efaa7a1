"""Faults during extraction end in one clear line, leave the entry incomplete (never read), and a
rerun resumes it."""

from __future__ import annotations

import errno

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


def test_a_resume_with_another_token_budget_starts_the_split_again_and_says_so(tiny_bert_dir, tiny_conll_dir,
                                                                                tmp_path, monkeypatch):
    """A split started with a too-large --token-budget kept it on every resume: the corrected flag was
    ignored without a word, and the same out-of-memory came back until `rm`."""
    import layerfuse.cache.shard as shard

    original, writes = shard._write_file, {"n": 0}

    def filling_up(path, out, size, **options):
        writes["n"] += 1
        if writes["n"] > 1:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return original(path, out, size, **options)

    monkeypatch.setattr(shard, "_write_file", filling_up)
    args = ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir), "--cache-dir", str(tmp_path),
            "--unit-rows", "256", "--splits", "train", "--quiet"]
    assert CliRunner().invoke(main, [*args, "--token-budget", "512"]).exit_code == 1  # one unit written
    monkeypatch.setattr(shard, "_write_file", original)
    again = CliRunner().invoke(main, [*args, "--token-budget", "256"])
    assert again.exit_code == 0, again.output
    assert "train: --token-budget 256, not the 512 it was started with: starting it again" in again.output
    assert "resuming train" not in again.output
    path = next(p for p in tmp_path.iterdir() if p.is_dir())
    assert zarr.open_group(str(path), mode="r")["train"].attrs["token_budget"] == 256
