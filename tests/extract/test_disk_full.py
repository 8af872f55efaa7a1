"""A disk that fills up mid-shard: the half-written file is removed at once (it would hold the space
a rerun needs), the error names the file and the bytes the shard needs, and the rerun resumes.
Half-written files a killed run left behind are removed by the next run."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from layerfuse.cache.reader import open_entry
from layerfuse.cli.extract import main


def _args(model, data, root) -> list[str]:
    return ["--model", str(model), "--dataset", str(data), "--cache-dir", str(root), "--unit-rows", "256",
            "--splits", "train", "--quiet"]


def _partials(root: Path) -> list[Path]:
    return sorted(root.glob("*/train/hidden/c/**/.*.partial"))


def test_a_shard_cut_short_by_a_full_disk_leaves_no_file(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch):
    import layerfuse.cache.shard as shard

    original = shard._write_file
    writes = {"n": 0}

    def filling_up(path, out, size, **options):
        writes["n"] += 1
        if writes["n"] > 2:  # the third shard gets half its bytes on disk, then the device is full
            Path(path).write_bytes(bytes(out[: size // 2]))
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return original(path, out, size, **options)

    monkeypatch.setattr(shard, "_write_file", filling_up)
    out = CliRunner().invoke(main, _args(tiny_bert_dir, tiny_conll_dir, tmp_path))
    assert out.exit_code == 1 and "Traceback" not in out.output
    (error,) = [line for line in out.output.splitlines() if line.startswith("error:")]
    assert "No space left on device writing " in error and "/train/hidden/c/2/0/0" in error
    assert re.search(r"the shard needs \d+\.\d [KM]iB and \d+\.\d [KM]iB is free", error)
    assert _partials(tmp_path) == []  # nothing left holding the space

    monkeypatch.setattr(shard, "_write_file", original)
    out = CliRunner().invoke(main, _args(tiny_bert_dir, tiny_conll_dir, tmp_path))
    assert out.exit_code == 0, out.output
    (entry,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    split = open_entry(str(entry)).split("train")
    assert split.n_rows == 1116 and np.all(np.abs(split.hidden(layers=[2]).astype(np.float32)).sum(-1) > 0)


def _killed_mid_shard(model, data, root, monkeypatch) -> Path:
    """An extract that dies writing its third shard (no cleanup of its own runs): the half-written file
    it leaves."""
    import layerfuse.cache.shard as shard

    original = shard._write_file
    writes = {"n": 0}

    def killed(path, out, size, **options):
        writes["n"] += 1
        if writes["n"] > 2:
            Path(path).write_bytes(bytes(out[: size // 2]))
            raise KeyboardInterrupt
        return original(path, out, size, **options)

    with monkeypatch.context() as patch:
        patch.setattr(shard, "_write_file", killed)
        CliRunner().invoke(main, _args(model, data, root))
    (left,) = _partials(root)
    return left


def test_partial_files_of_a_killed_run_are_removed_by_the_next(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch):
    left = _killed_mid_shard(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = left.with_name(left.name.replace(f".{os.getpid()}.", f".{gone.stdout.strip()}."))
    left.rename(stale)  # as a process that is gone now left it

    out = CliRunner().invoke(main, _args(tiny_bert_dir, tiny_conll_dir, tmp_path))
    assert out.exit_code == 0, out.output
    assert _partials(tmp_path) == []
    (entry,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert open_entry(str(entry)).split("train").n_rows == 1116


def test_a_full_disk_met_writing_metadata_names_the_file(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch):
    from zarr.storage import LocalStore

    original = LocalStore.set

    async def full_at_completion(self, key, value, *args, **kwargs):
        if key == "train/zarr.json" and b'"complete": true' in value.to_bytes():
            raise OSError(errno.ENOSPC, "No space left on device")  # as a file's write raises it: no name
        return await original(self, key, value, *args, **kwargs)

    monkeypatch.setattr(LocalStore, "set", full_at_completion)
    out = CliRunner().invoke(main, _args(tiny_bert_dir, tiny_conll_dir, tmp_path))
    assert out.exit_code == 1 and "Traceback" not in out.output
    (error,) = [line for line in out.output.splitlines() if line.startswith("error:")]
    assert "No space left on device writing the split's completion record" in error
    assert "/train/zarr.json" in error and str(tmp_path) in error


def test_a_run_that_waited_on_a_killed_writer_removes_its_partial_files(tiny_bert_dir, tiny_conll_dir, tmp_path,
                                                                       monkeypatch):
    """A second extract waits for the entry while the first writes; the first is killed mid-shard. Its
    half-written file was alive when the second looked before waiting, and stayed in the finished entry
    for good (its size counted twice, kept by every later run and by gc)."""
    from layerfuse.extract import run

    left = _killed_mid_shard(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch)
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # the first run, alive
    left.rename(left.with_name(left.name.replace(f".{os.getpid()}.", f".{writer.pid}.")))

    class LockFreedByAKill(run.EntryLock):
        def __enter__(self):  # while this run waited, the writer holding the entry was killed
            writer.kill()
            writer.wait()
            return super().__enter__()

    monkeypatch.setattr(run, "EntryLock", LockFreedByAKill)
    out = CliRunner().invoke(main, _args(tiny_bert_dir, tiny_conll_dir, tmp_path))
    assert out.exit_code == 0, out.output
    assert _partials(tmp_path) == []


def test_a_disk_out_of_inodes_is_not_called_short_of_bytes(tmp_path, monkeypatch):
    """A file system out of inodes fails with ENOSPC while bytes are free: the error said "the shard needs
    26.3 MiB and 99.9 MiB is free", contradicting itself."""
    import os
    from pathlib import Path
    from types import SimpleNamespace

    from layerfuse.cache.shard import DiskFullError

    real = os.statvfs
    fields = [name for name in dir(real(tmp_path)) if name.startswith("f_")]
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(
        **{name: 0 if name == "f_favail" else getattr(real(path), name) for name in fields}))
    said = str(DiskFullError(Path(tmp_path) / "0", 2**20))
    assert "no inodes are free" in said and "rerun the same command to resume" in said
    # a file system without an inode table (btrfs: every inode count 0) is short of bytes, not of inodes
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(
        **{name: 0 if name in ("f_files", "f_ffree", "f_favail") else getattr(real(path), name) for name in fields}))
    assert "is free; free space" in str(DiskFullError(Path(tmp_path) / "0", 2**20))
