"""An entry a reader has open is never deleted under it, however long ago it last read: `gc` skips
it and says why, `rm` refuses in one line, and the reader's next read returns the bytes, not zeros.
The reader's lock goes with the reader: once it closes the entry or dies, the entry can go."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from click.testing import CliRunner

from layerfuse.cache import usage
from layerfuse.cache.reader import open_entry
from layerfuse.cli.main import main

# Opens the entry, reads a layer, says so, then keeps the entry open until killed.
READER = textwrap.dedent(
    """
    import sys, time
    from layerfuse.cache.reader import open_entry
    entry = open_entry(sys.argv[1])
    entry.split("dev").hidden(layers=[1])
    print("open", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def entry(tiny_cache, tmp_path) -> str:
    path = tmp_path / "root" / os.path.basename(tiny_cache)
    shutil.copytree(tiny_cache, path)
    return str(path)


def _long_ago(path: str) -> None:
    """The last recorded read an hour back: a run that reads rarely (or loaded everything at start)."""
    sidecar = path + ".read"
    open(sidecar, "a").close()
    os.utime(sidecar, (time.time() - 3600, time.time() - 3600))


def _reader(path: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", READER, path], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert child.stdout.readline().strip() == "open", "the reader never opened the entry"
    return child


@pytest.mark.slow
def test_gc_and_rm_skip_an_entry_another_process_has_open(entry):
    root = os.path.dirname(entry)
    child = _reader(entry)
    try:
        _long_ago(entry)
        gc = CliRunner().invoke(main, ["gc", "--max-size", "0", "--cache-dir", root])
        rm = CliRunner().invoke(main, ["rm", "--yes", entry])
        assert os.path.isdir(entry) and os.path.isfile(os.path.join(entry, "zarr.json"))
        assert gc.exit_code == 1 and "still over the limit" in gc.stderr, gc.output  # the root does not fit
        assert f"skipped {entry}: open by a reader (process {child.pid})" in gc.stderr, gc.output
        assert rm.exit_code == 1 and len(rm.stderr.strip().splitlines()) == 1, rm.output
        assert f"{entry} is open by a reader (process {child.pid}); not removed" in rm.stderr, rm.output
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # the reader is gone, and its lock with it
    removed = CliRunner().invoke(main, ["rm", "--yes", entry])
    assert removed.exit_code == 0 and not os.path.exists(entry), removed.output


def test_a_reader_keeps_reading_its_bytes_across_a_gc(entry):
    root = os.path.dirname(entry)
    reader = open_entry(entry)
    before = reader.split("dev").hidden(layers=[1, 2])
    _long_ago(entry)
    gc = CliRunner().invoke(main, ["gc", "--max-size", "0", "--cache-dir", root])
    assert gc.exit_code == 1 and f"skipped {entry}: open by a reader" in gc.stderr, gc.output  # kept: over the limit
    np.testing.assert_array_equal(reader.split("dev").hidden(layers=[1, 2]), before)  # its next read
    assert np.any(before != 0)
    reader.close()
    assert not usage.in_use(entry)
    again = CliRunner().invoke(main, ["gc", "--max-size", "0", "--cache-dir", root])
    assert again.exit_code == 0 and not os.path.exists(entry), again.output


def test_a_dropped_reader_releases_the_entry(entry):
    view = open_entry(entry).with_labels(None)  # the entry itself is dropped at once; its view holds it
    assert usage.in_use(entry)
    del view
    assert not usage.in_use(entry)


def test_an_entry_removed_while_being_opened_is_an_error_not_an_empty_entry(entry):
    import threading

    from layerfuse.errors import LayerfuseError

    outcome = []

    def reader():
        try:
            outcome.append(open_entry(entry))
        except LayerfuseError as exc:
            outcome.append(exc)

    with usage.exclusive(entry):  # what `rm` holds while it deletes
        thread = threading.Thread(target=reader)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive(), "the reader did not wait for the removal"
        shutil.rmtree(entry)
    thread.join(30)
    [error] = outcome
    assert isinstance(error, LayerfuseError) and "removed" in str(error), error


def test_checks_never_turn_a_reader_away(entry, monkeypatch):
    """`gc --dry-run` and `busy` (what `ls`, `info` and `/api/entries` report as in use) only look: they
    take no exclusive lock, so a reader opening the entry at that instant is never told "being removed"."""
    import threading

    exclusive, real = [], usage.fcntl.flock

    def flock(fd, op):
        if op & usage.fcntl.LOCK_EX:
            exclusive.append(op)
        return real(fd, op)

    monkeypatch.setattr(usage.fcntl, "flock", flock)
    gc = CliRunner().invoke(main, ["gc", "--max-size", "0", "--dry-run", "--cache-dir", os.path.dirname(entry)])
    assert gc.exit_code == 0, gc.output
    assert usage.busy(entry) is None and exclusive == []
    with open_entry(entry):
        assert usage.busy(entry).startswith("open by a reader (process ")
    turned_away, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            usage.busy(entry)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        for _ in range(300):  # readers arriving while another process checks the entry in a tight loop
            try:
                usage.hold(entry, wait=False).release()
            except usage.EntryInUse:
                turned_away.append(1)
    finally:
        stop.set()
        poller.join()
    assert turned_away == [] and exclusive == []
