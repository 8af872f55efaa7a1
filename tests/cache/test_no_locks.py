"""A cache root or a run folder on a file system without file locks (NFS without lockd, Lustre without
-o flock, some FUSE mounts): one line naming the lock file and what to do. `extract` waited forever (filelock
fell back to a marker file, which the empty lock file an earlier extract left held for good); elsewhere a bare
"No locks available" named no file."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil

import pytest
from cli_output import one_error_line
from click.testing import CliRunner

from layerfuse import files
from layerfuse.cli.main import main

NOT_SUPPORTED = "the file system does not support file locks"


@pytest.fixture(params=[errno.ENOSYS, errno.ENOLCK])
def no_locks(request, monkeypatch):
    real = fcntl.flock

    def flock(fd, how):
        raise OSError(request.param, os.strerror(request.param))

    monkeypatch.setattr(files.fcntl, "flock", flock)
    yield
    monkeypatch.setattr(files.fcntl, "flock", real)


def test_extract_into_an_entry_left_locked_says_so_at_once(tiny_cache, tmp_path, no_locks):
    root = tmp_path / "root"
    entry = root / os.path.basename(tiny_cache)
    shutil.copytree(tiny_cache, entry)
    for split in ("train", "dev", "test"):  # unfinished: extract must write, and so lock
        shutil.rmtree(entry / split, ignore_errors=True)
    open(f"{entry}.lock", "w").close()  # the empty lock file every extract leaves
    from layerfuse.cache.lock import EntryLock

    with pytest.raises(files.LocksUnsupported) as exc:
        with EntryLock(str(entry), log=lambda m: None):
            pass
    assert exc.value.filename == f"{entry}.lock" and NOT_SUPPORTED in exc.value.strerror


def test_a_run_folder_without_locks_is_one_line_naming_its_lock_file(tiny_cache, tmp_path, no_locks, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the head the run could not save goes
    out = tmp_path / "runs"
    line = one_error_line(CliRunner().invoke(main, ["train-head", "--cache", tiny_cache, "--fusion", "concat",
                                                    "--shots", "2", "--epochs", "1", "--out", str(out)]))
    assert NOT_SUPPORTED in line and "put the cache root or --out on a local disk" in line
    assert list(tmp_path.glob("layerfuse-*"))  # trained, so saved elsewhere, as the line says


def test_gc_on_a_root_without_locks_is_one_line(tiny_cache, tmp_path, no_locks):
    root = tmp_path / "root"
    entry = root / os.path.basename(tiny_cache)
    shutil.copytree(tiny_cache, entry)
    open(f"{entry}.lock", "w").close()
    said = CliRunner().invoke(main, ["gc", "--max-size", "0", "--dry-run", "--cache-dir", str(root)])
    assert f"{entry}.lock does not support file locks; remove it by hand" in said.output  # said of the entry
    assert os.path.isdir(entry)
