"""A cache root on an S3-compatible object store (moto's server on 127.0.0.1, through s3fs):
extract, reuse, list, read and verify work as on a local disk, and the lease is released."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # starts an S3 (moto) server

pytest.importorskip("s3fs", reason="s3fs is part of the test extra")
moto_server = pytest.importorskip("moto.server", reason="moto[server] is part of the test extra")


@pytest.fixture
def s3_root(monkeypatch):
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for key, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}"}.items():
        monkeypatch.setenv(key, value)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    bucket = f"layerfuse-{uuid.uuid4().hex[:8]}"  # moto keeps state per process
    s3fs.S3FileSystem().mkdir(bucket)
    yield f"s3://{bucket}/cache"
    server.stop()


def test_entry_round_trips_through_s3(s3_root, tiny_bert_dir, tiny_conll_dir, tiny_cache):
    import s3fs

    from layerfuse.cache.manage import list_entries, verify
    from layerfuse.cache.reader import open_entry
    from layerfuse.extract.run import ExtractConfig, extract

    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=s3_root, unit_rows=256)
    first = extract(config, progress=False, log=lambda m: None)
    assert first.path.startswith(s3_root) and not any(s.reused for s in first.splits)
    assert all(s.reused for s in extract(config, progress=False, log=lambda m: None).splits)
    remote, local = open_entry(first.path), open_entry(tiny_cache)
    assert remote.splits == local.splits == ["train", "dev", "test"]
    for split in remote.splits:
        np.testing.assert_array_equal(remote.split(split).hidden(), local.split(split).hidden())
        np.testing.assert_array_equal(remote.split(split).labels, local.split(split).labels)
    assert [e.path for e in list_entries(s3_root)] == [first.path]
    assert verify(first.path) == []
    fs = s3fs.S3FileSystem()
    assert not fs.exists(first.path.split("://", 1)[1] + ".lock")  # the lease is gone


def test_a_live_lease_makes_a_second_writer_wait(s3_root):
    import threading
    import time

    from layerfuse.cache.lock import EntryLock

    path = s3_root + "/entry"
    order, messages = [], []
    first = EntryLock(path, poll_seconds=0.2)
    first.__enter__()

    def second():
        with EntryLock(path, log=messages.append, poll_seconds=0.2):
            order.append("second")

    t = threading.Thread(target=second)
    t.start()
    time.sleep(1.5)
    order.append("first releases")
    first.__exit__(None, None, None)
    t.join(timeout=30)
    assert order == ["first releases", "second"] and "waiting" in messages[0]


def test_a_lease_of_a_dead_process_of_this_host_is_taken_at_once(s3_root):
    """A rerun after a failed extract waited for the dead run's lease to expire (two minutes)."""
    import json
    import os
    import subprocess
    import sys
    import time

    import fsspec

    from layerfuse.cache.lock import EntryLock

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    path = s3_root + "/entry"
    fs, base = fsspec.core.url_to_fs(path)
    fs.pipe_file(base + ".lock", json.dumps({"owner": f"{os.uname().nodename}:{gone.stdout.strip()}:dead",
                                             "expires": time.time() + 120}).encode())
    messages, t0 = [], time.perf_counter()
    with EntryLock(path, log=messages.append, poll_seconds=0.2):
        pass
    assert time.perf_counter() - t0 < 10 and not messages


def test_a_lease_stamped_to_expire_a_day_ahead_is_taken_once_unrenewed_for_its_lease_time(monkeypatch):
    """A killed writer whose clock ran a day ahead left a lease that, by this machine's clock, expired a day
    later: every other extract of the entry waited a day for it."""
    import json
    import time

    import fsspec

    from layerfuse.cache.lock import EntryLock

    base = f"/lease-{uuid.uuid4().hex}/entry"
    ahead = {"owner": "gpu-node-7:4242:abcd1234", "expires": time.time() + 86400}
    fsspec.filesystem("memory").pipe_file(base + ".lock", json.dumps(ahead).encode())
    clock = [0.0]  # this machine's monotonic clock, moved by each wait

    def sleep(seconds):
        clock[0] += seconds
        assert clock[0] < 600, "still waiting for the lease after 10 minutes"

    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", sleep)
    messages = []
    with EntryLock("memory:/" + base, log=messages.append, lease_seconds=120.0) as lock:
        assert lock._read_lease()["owner"] == lock.owner
    assert 120 <= clock[0] < 130 and "gpu-node-7:4242:abcd1234" in messages[0]


def test_bytes_on_disk_reads_a_fresh_listing(s3_root):
    # a resumed extraction wrote units through zarr's own filesystem after this one had listed the split:
    # the stale listing ended the run in "error: <object path>" with the other splits never extracted
    import s3fs

    from layerfuse.cache.manage import bytes_on_disk

    fs = s3fs.S3FileSystem()
    base = s3_root[len("s3://"):] + "/entry/train/done/c"
    fs.pipe(f"{base}/0", b"x" * 10)
    assert bytes_on_disk(s3_root + "/entry/train") == 10  # lists the split, and keeps the listing
    s3fs.S3FileSystem(skip_instance_cache=True).pipe(f"{base}/1", b"y" * 5)  # another writer
    assert bytes_on_disk(s3_root + "/entry/train") == 15



def test_an_entry_that_cannot_be_read_is_never_written_over(s3_root, tiny_bert_dir, tiny_conll_dir):
    """A damaged zarr.json on S3 (or a refused request) read as "no entry": `extract` created a new entry over
    it, deleting its splits, and exited 0."""
    import s3fs

    from layerfuse.errors import LayerfuseError
    from layerfuse.extract.run import ExtractConfig, extract

    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=s3_root, unit_rows=256)
    path = extract(config, progress=False, log=lambda m: None).path
    fs = s3fs.S3FileSystem()
    key = path.removeprefix("s3://") + "/zarr.json"
    fs.pipe_file(key, fs.cat_file(key)[:-5])
    objects = sorted(fs.find(path.removeprefix("s3://")))
    with pytest.raises(LayerfuseError, match="zarr.json is corrupt"):
        extract(ExtractConfig(**{**config.__dict__, "splits": ("train",)}), progress=False, log=lambda m: None)
    fs.invalidate_cache()
    assert sorted(fs.find(path.removeprefix("s3://"))) == objects  # nothing deleted, nothing written
