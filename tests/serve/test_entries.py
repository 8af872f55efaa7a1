"""Complete entries over HTTP: train-head reads one remotely and scores as it does locally; nothing
outside a complete entry is served; a read token closes reads; concurrent readers get the local
bytes; the JSON API describes entries."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import stat
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import datetime
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

pytestmark = pytest.mark.usefixtures("one_thread")


def request(url: str, path: str, *, method: str = "GET", headers: dict | None = None):
    """One request with ``path`` sent exactly as written (no client-side normalisation of ``..``)."""
    host = urlsplit(url)
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def get_json(url: str, path: str, **kwargs):
    status, _, body = request(url, path, **kwargs)
    return status, json.loads(body)


def entry_files(entry: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), entry) for d, _, files in os.walk(entry) for f in files)


@pytest.mark.slow
def test_train_head_over_http_scores_as_local(served, served_root, tiny_cache, tmp_path):
    from layerfuse.cache.usage import last_read
    from layerfuse.cli.train import main

    name = os.path.basename(tiny_cache)
    records = {}
    for where, cache in {"local": str(served_root / name), "remote": f"{served.url}/entries/{name}"}.items():
        out = tmp_path / where
        result = CliRunner().invoke(main, ["--cache", cache, "--fusion", "scalarmix", "--shots", "8", "--epochs", "2",
                                           "--seed", "1", "--lr", "0.01", "--precision", "fp32", "--out", str(out)])
        assert result.exit_code == 0, result.output
        records[where] = json.loads((out / "scalarmix-n8-e2-s1.json").read_text())
    local, remote = records["local"], records["remote"]
    assert remote["cache_path"].startswith("http://") and local["best_dev_f1"] > 0
    assert (remote["best_dev_f1"], remote["test_f1_at_best"]) == (local["best_dev_f1"], local["test_f1_at_best"])
    curve = lambda record: [(e["dev_f1"], e["train_loss"]) for e in record["evals"]]  # noqa: E731
    assert curve(remote) == curve(local)
    assert last_read(str(served_root / name)) is not None  # the server recorded the read


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Object at:UserWarning")  # zarr, of the symlinks put in the entry
def test_nothing_outside_a_complete_entry_is_served(serve, served_root, tiny_cache, tmp_path):
    import zarr

    name = os.path.basename(tiny_cache)
    entry = served_root / name
    (tmp_path / "secret.txt").write_text("secret")
    (served_root / ".serve-token").write_text("secret")
    os.symlink(tmp_path / "secret.txt", entry / "escape")
    os.symlink(tmp_path, entry / "outside")
    shutil.copytree(entry, tmp_path / "elsewhere", symlinks=True)
    os.symlink(tmp_path / "elsewhere", served_root / "linked")  # an entry that is not under the root
    shutil.copytree(entry, served_root / "partial", symlinks=True)
    zarr.open_group(str(served_root / "partial"), mode="r+")["test"].attrs["complete"] = False
    server = serve(served_root)

    assert request(server.url, f"/entries/{name}/zarr.json")[0] == 200
    refused = [f"/entries/{name}/../../secret.txt", f"/entries/{name}/..%2f..%2fsecret.txt",
               f"/entries/{name}/%2e%2e/%2e%2e/secret.txt", "/entries/..%2fsecret.txt", "/entries/../secret.txt",
               f"/entries/{name}//{tmp_path}/secret.txt", f"/entries/%2f{str(tmp_path)[1:]}/secret.txt",
               f"/entries/{name}/escape", f"/entries/{name}/outside/secret.txt", "/entries/linked/zarr.json",
               "/entries/.serve-token", "/entries/partial/zarr.json", "/entries/partial/test/zarr.json",
               "/entries/partial", "/api/entries/..%2fsecret.txt", f"/api/entries/{name}/..%2f..%2fsecret.txt"]
    for path in refused:
        status, headers, body = request(server.url, path)
        assert status in (403, 404), path
        assert b"secret" not in body.replace(b"secret.txt", b"") and "error" in json.loads(body), path

    listed = {e["name"]: e["complete"] for e in get_json(server.url, "/api/entries")[1]}
    assert listed == {name: True, "partial": False}  # the symlinked entry is not under the root
    index = request(server.url, "/entries/")[2].decode()
    assert f'href="/entries/{name}/"' in index and "partial" not in index and "linked" not in index
    assert "escape" not in request(server.url, f"/entries/{name}")[2].decode()
    page = request(server.url, "/")[2].decode()  # the page listed the linked entry, sized outside the root
    assert '<p class="muted">2 entries' in page and "linked" not in page


@pytest.mark.slow
def test_a_split_added_to_an_entry_leaves_its_finished_splits_served(served, served_root, tiny_cache):
    """A job adding a split to an entry made its finished splits 404 for the whole job: a trainer that had
    opened one over HTTP died reading its next chunk, told to re-extract a healthy entry."""
    import numpy as np
    import zarr

    from layerfuse.cache.reader import open_entry

    name = os.path.basename(tiny_cache)
    train = open_entry(f"{served.url}/entries/{name}").split("train")
    before = train.hidden(sentences=[0, 1])
    zarr.open_group(str(served_root / name), mode="r+")["test"].attrs["complete"] = False  # being written
    assert np.array_equal(train.hidden(sentences=[0, 1]), before)
    chunk = next(f for f in entry_files(str(served_root / name)) if f.startswith("train/hidden/c/"))
    assert request(served.url, f"/entries/{name}/{chunk}")[0] == 200
    test_chunk = next(f for f in entry_files(str(served_root / name)) if f.startswith("test/hidden/c/"))
    for path in (test_chunk, "zarr.json", "train"):  # the split being written; opening the entry; a bare split
        assert request(served.url, f"/entries/{name}/{path}")[0] == 404, path


@pytest.mark.slow
@pytest.mark.parametrize("server_fields", [{"read_token": "read-token-of-the-tests"}])
def test_reads_need_the_read_token_when_set(served, tiny_cache, monkeypatch):
    import fsspec.config

    from layerfuse.cache.reader import open_entry

    name = os.path.basename(tiny_cache)
    paths = ["/api/entries", f"/api/entries/{name}", "/entries/", f"/entries/{name}", f"/entries/{name}/zarr.json"]
    for path in paths:
        for header in (None, "Bearer wrong", "read-token-of-the-tests"):
            status, headers, body = request(served.url, path, headers={"Authorization": header} if header else {})
            assert status == 401 and headers["www-authenticate"] == "Bearer" and "error" in json.loads(body), path
        for token in ("read-token-of-the-tests", served.state.token):
            assert request(served.url, path, headers={"Authorization": f"Bearer {token}"})[0] == 200, path
    # A client passes it through fsspec's configuration (FSSPEC_HTTP='{"headers": {...}}' in the environment).
    monkeypatch.setitem(fsspec.config.conf, "http", {"headers": {"Authorization": "Bearer read-token-of-the-tests"}})
    assert open_entry(f"{served.url}/entries/{name}").splits == ["train", "dev", "test"]


@pytest.mark.parametrize("server_fields", [{"read_token": "read-token-of-the-tests"}])
def test_a_refused_or_unreachable_http_root_is_one_line_and_exit_1(served, tiny_cache):

    from layerfuse.cli.main import main

    name = os.path.basename(tiny_cache)
    for args in (["info", f"{served.url}/entries/{name}"], ["ls", "--cache-dir", f"{served.url}/entries"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr.startswith(f"error: {served.url}/") and "answered 401 Unauthorized" in result.stderr
        assert "FSSPEC_HTTP" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    with socket.socket() as s:  # a port nothing listens on: it was "no entries", exit 0
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(main, ["ls", "--cache-dir", f"http://127.0.0.1:{port}/entries"])
    assert result.exit_code == 1 and result.stderr.startswith(f"error: cannot list http://127.0.0.1:{port}/entries: ")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.slow
def test_sixteen_concurrent_readers_get_the_local_bytes(served, served_root, tiny_cache):
    name = os.path.basename(tiny_cache)
    entry = served_root / name
    files = entry_files(str(entry))
    local = {f: (entry / f).read_bytes() for f in files}
    assert any("/hidden/c/" in f for f in files)  # shards among them

    def reader(index: int) -> dict:
        host = urlsplit(served.url)
        conn = http.client.HTTPConnection(host.hostname, host.port, timeout=10)  # one kept-alive connection
        got = {}
        for f in files:
            conn.request("GET", f"/entries/{name}/{f}")
            response = conn.getresponse()
            got[f] = response.status, response.read()
        conn.close()
        return got

    with ThreadPoolExecutor(max_workers=16) as pool:
        futures = [pool.submit(reader, i) for i in range(16)]
        done, pending = wait(futures, timeout=60)
    assert not pending
    for future in futures:
        assert future.result() == {f: (200, data) for f, data in local.items()}


@pytest.mark.slow
def test_ranges_and_sizes_as_fsspec_asks_for_them(served, served_root, tiny_cache):
    from fsspec.implementations.http import HTTPFileSystem

    name = os.path.basename(tiny_cache)
    shard = next(f for f in entry_files(str(served_root / name)) if "/hidden/c/" in f)
    data = (served_root / name / shard).read_bytes()
    url = f"{served.url}/entries/{name}/{shard}"
    fs = HTTPFileSystem()
    assert fs.info(url)["size"] == len(data)  # HEAD's Content-Length
    assert fs.cat_file(url, start=-16) == data[-16:]  # bytes=-16: a shard's index
    assert fs.cat_file(url, start=10, end=30) == data[10:30]  # bytes=10-29: an inner chunk
    assert fs.cat_file(url, start=len(data) - 5) == data[-5:]  # bytes=N-
    status, headers, body = request(served.url, f"/entries/{name}/{shard}", headers={"Range": "bytes=-16"})
    assert status == 206 and headers["content-range"] == f"bytes {len(data) - 16}-{len(data) - 1}/{len(data)}"
    status, headers, body = request(served.url, f"/entries/{name}/{shard}", method="HEAD")
    assert status == 200 and int(headers["content-length"]) == len(data) and body == b""
    assert request(served.url, f"/entries/{name}/train/hidden/c/999/0/0")[0] == 404  # an absent chunk


@pytest.mark.slow
def test_an_http_root_lists_its_complete_entries(served, tiny_cache):
    from layerfuse.cache.manage import list_entries
    from layerfuse.experiments.find import resolve_entry

    url = f"{served.url}/entries/{os.path.basename(tiny_cache)}"
    (entry,) = list_entries(f"{served.url}/entries")
    assert (entry.path, entry.complete, entry.bytes_on_disk) == (url, True, None)  # HTTP listings carry no sizes
    assert resolve_entry(cache_dir=f"{served.url}/entries", log=lambda m: None).path == url


@pytest.mark.slow
def test_api_describes_entries(served, served_root, tiny_cache, monkeypatch):
    from layerfuse.cache.manage import OPTION_FIELDS, entry_status
    from layerfuse.cache.reader import open_entry

    monkeypatch.setattr("layerfuse.cache.reader.mark_read", lambda path: None)  # only the server's reads count here
    name = os.path.basename(tiny_cache)
    local = open_entry(str(served_root / name))
    status = entry_status(str(served_root / name))
    code, listed = get_json(served.url, "/api/entries")
    assert code == 200 and [e["name"] for e in listed] == [name]
    (e,) = listed
    assert e["options"] == {f: status.fields[f] for f in OPTION_FIELDS} and e["model"] == local.meta["model"]
    assert {s: v["rows"] for s, v in e["splits"].items()} == {s: local.split(s).n_rows for s in local.splits}
    assert e["complete"] and e["bytes"] == status.bytes_on_disk
    assert datetime.fromisoformat(e["created"]) == datetime.fromisoformat(local.meta["created"])  # in UTC
    assert e["url"] == f"/entries/{name}" and e["last_read"] is None
    request(served.url, f"/entries/{name}/zarr.json")  # what `ls` over HTTP reads: not a read (gc's order)
    assert get_json(served.url, "/api/entries")[1][0]["last_read"] is None
    chunk = next(p for p in sorted((served_root / name / "train" / "hidden").rglob("*")) if p.is_file()
                 and p.name != "zarr.json")
    request(served.url, f"/entries/{name}/{chunk.relative_to(served_root / name).as_posix()}")
    assert get_json(served.url, "/api/entries")[1][0]["last_read"] is not None
    code, one = get_json(served.url, f"/api/entries/{name}")
    assert code == 200 and one["meta"] == {**local.stored_meta, "created": e["created"]}  # its time in the API's
    assert set(one["splits"]) == set(local.splits)
    # a split in the detail carries the listing's fields too: it replaced them with its stored attributes
    for split, listed_split in e["splits"].items():
        assert {k: one["splits"][split][k] for k in listed_split} == listed_split
        assert one["splits"][split]["hidden_shape"][0] == listed_split["rows"]
    assert get_json(served.url, "/api/entries/nothing-here") == (404, {"error": "no entry named 'nothing-here'"})
    assert get_json(served.url, "/api/no-such-route")[0] == 404


def test_a_second_server_on_one_root_is_refused_before_it_reads_the_jobs(tmp_path, monkeypatch):
    # its queue would set the first server's running job back to queued in the shared .jobs folder
    import uvicorn

    from layerfuse.cli.main import main

    root = tmp_path / "root"
    second = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: second.append(
        CliRunner().invoke(main, ["serve", "--cache-dir", str(root), "--port", "0"])))
    first = CliRunner().invoke(main, ["serve", "--cache-dir", str(root), "--port", "0"])
    assert first.exit_code == 0, first.output
    [refused] = second
    assert refused.exit_code == 1 and "another layerfuse serve runs on" in refused.stderr, refused.output
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    assert CliRunner().invoke(main, ["serve", "--cache-dir", str(root), "--port", "0"]).exit_code == 0  # released


def test_serve_keeps_its_token_in_a_private_file_and_never_prints_it(tmp_path, monkeypatch):
    import uvicorn

    from layerfuse.cli.main import main

    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append((app.state.server, kw)))
    root = tmp_path / "root"
    first = CliRunner().invoke(main, ["serve", "--cache-dir", str(root), "--port", "0"])
    assert first.exit_code == 0, first.output
    token_file = root / ".serve-token"
    token = token_file.read_text().strip()
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and len(token) >= 32
    assert str(token_file) in first.output and token not in first.output
    state, kwargs = calls[0]
    assert (state.token, state.read_token, kwargs["host"]) == (token, None, "127.0.0.1")
    again = CliRunner().invoke(main, ["serve", "--cache-dir", str(root), "--port", "0"])
    assert again.exit_code == 0 and calls[1][0].token == token  # kept across restarts
    (tmp_path / "empty").write_text("\n")
    refused = CliRunner().invoke(main, ["serve", "--cache-dir", str(root), "--token-file", str(tmp_path / "empty")])
    assert refused.exit_code == 1 and refused.output.startswith("error: token file") and len(calls) == 2


def test_an_entry_named_with_a_space_or_an_accent_reads_complete_and_folders_list_as_folders(serve, served_root,
                                                                                           tiny_cache):
    """Listings sent their links decoded: an entry renamed by hand to ``café ü#x`` listed no split that its own
    links matched, so `ls`, `info`, `verify` and `train-head` over HTTP took a complete entry for unfinished.
    And folders were listed as files: fsspec's find and walk over an entry found no chunk."""
    from urllib.parse import quote

    import fsspec

    from layerfuse.cache.manage import entry_status

    name = "café ü#x"
    os.rename(served_root / os.path.basename(tiny_cache), served_root / name)
    server = serve(served_root)
    url = f"{server.url}/entries/{quote(name, safe='')}"
    assert entry_status(url, size=False).complete
    fs = fsspec.filesystem("http")
    found = fs.find(f"{url}/dev/labels")
    assert found and all("/dev/labels/c/" in f or f.endswith("/zarr.json") for f in found), found
    assert {e["type"] for e in fs.ls(url, detail=True) if e["name"].rstrip("/").endswith("/dev")} == {"directory"}
