"""HTTP as the API's clients read it: a ``Range`` header that is not well formed, or of another unit, is
ignored (RFC 9110 §14.2: the whole file, 200), a well-formed one past the end is a 416; a job naming a model
folder that does not exist under a data directory says which, as a missing dataset path does; every time the
JSON API gives is ISO 8601 in UTC, in one format, whatever the stored stamps' offsets."""

from __future__ import annotations

import os
import re
import shutil
from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

from layerfuse.serve.app import create_app
from layerfuse.serve.state import ServerState

pytestmark = pytest.mark.usefixtures("one_thread")

TOKEN = "write-token-of-the-http-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00")


@pytest.fixture
def served_file(tiny_cache, tmp_path):
    """A client of a root holding the tiny entry, the path of one of its files, and that file's bytes."""
    root = tmp_path / "root"
    name = os.path.basename(tiny_cache)
    shutil.copytree(tiny_cache, root / name)
    client = TestClient(create_app(ServerState(root=root, token=TOKEN)))
    return client, f"/entries/{name}/zarr.json", (root / name / "zarr.json").read_bytes()


@pytest.mark.parametrize("header", ["bytes=abc", "bytes=5-2", "items=0-1", "bytes=abc,def", "bytes=0-1,x",
                                    "bytes=", "bytes=,", "bytes=--1", "bytes=1-2-3", "bytes=+1-2", "bytes=1_0-20",
                                    "bytes 0-1", "0-1", "bytes =0-1"])
def test_a_range_header_that_is_not_well_formed_is_ignored(served_file, header):
    client, path, data = served_file
    response = client.get(path, headers={"Range": header})
    assert response.status_code == 200, (header, response.status_code, response.text)
    assert response.content == data and "content-range" not in response.headers
    head = client.head(path, headers={"Range": header})
    assert head.status_code == 200 and int(head.headers["content-length"]) == len(data)


def test_well_formed_ranges_are_served_and_only_those_past_the_end_refused(served_file):
    client, path, data = served_file
    size = len(data)
    served = {"bytes=0-9": (0, 9), "bytes=-16": (size - 16, size - 1), f"bytes={size - 5}-": (size - 5, size - 1),
              "BYTES=2-3": (2, 3), f"bytes=0-{size + 100}": (0, size - 1),
              f"bytes=0-1, {size + 10}-": (0, 1)}  # a range past the end beside one that is not: that one
    for header, (first, last) in served.items():
        response = client.get(path, headers={"Range": header})
        assert response.status_code == 206, (header, response.text)
        assert response.headers["content-range"] == f"bytes {first}-{last}/{size}", header
        assert response.content == data[first:last + 1], header
    both = client.get(path, headers={"Range": "bytes=0-1,,4-5"})  # an empty element of the list is no range
    assert both.status_code == 206 and both.headers["content-type"].startswith("multipart/byteranges")
    for header in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}", "bytes=-0", f"bytes={size}-,{size + 1}-"):
        response = client.get(path, headers={"Range": header})
        assert response.status_code == 416, (header, response.text)
        assert response.headers["content-range"] == f"bytes */{size}" and response.json()["error"], header


def test_a_model_or_dataset_path_missing_under_a_data_dir_is_named(tiny_bert_dir, tiny_conll_dir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_conll_dir, data / "conll")
    client = TestClient(create_app(ServerState(root=tmp_path / "root", token=TOKEN, data_dirs=[data])))
    for field in ("model", "dataset"):
        missing = str(data / f"no-such-{field}")
        body = {"model": "bert-base-cased", "dataset": str(data / "conll"), "splits": ["dev"], field: missing}
        response = client.post("/api/jobs", json=body, headers=AUTH)
        assert response.status_code == 422, response.text
        assert response.json() == {"error": f"{field} path {missing!r} does not exist"}
    assert client.get("/api/jobs", headers=AUTH).json() == {"jobs": []}


def _instant(stamp) -> datetime:
    return datetime.fromisoformat(stamp).astimezone(UTC)


def test_every_time_of_the_api_is_iso_8601_utc_in_one_format(tiny_cache, tiny_bert_dir, tiny_conll_dir, tmp_path):
    import zarr

    from layerfuse.cache.usage import last_read, mark_read

    root = tmp_path / "root"
    name = os.path.basename(tiny_cache)
    shutil.copytree(tiny_cache, root / name)
    stored = zarr.open_group(str(root / name), mode="r+")
    stored.attrs["created"] = "2024-05-01T12:00:00+0530"  # made under another zone: kept on disk as it was
    stored["dev"].attrs["finished"] = "2024-05-01T13:00:00-0700"
    mark_read(str(root / name))
    client = TestClient(create_app(ServerState(root=root, token=TOKEN, data_dirs=[tiny_bert_dir, tiny_conll_dir])))

    (listed,) = client.get("/api/entries").json()
    detail = client.get(f"/api/entries/{name}").json()
    job = client.post("/api/jobs", json={"model": str(tiny_bert_dir), "dataset": str(tiny_conll_dir),
                                         "splits": ["dev"]}, headers=AUTH).json()
    times = {"created": listed["created"], "finished": listed["finished"], "last_read": listed["last_read"],
             "meta.created": detail["meta"]["created"], "dev.finished": detail["splits"]["dev"]["finished"],
             "dev.created": detail["splits"]["dev"]["created"], "job.created": job["created"],
             "listed job.created": client.get("/api/jobs").json()["jobs"][0]["created"]}
    assert {k: v for k, v in times.items() if not API_TIME.fullmatch(str(v))} == {}
    assert listed["created"] == detail["meta"]["created"] == "2024-05-01T06:30:00.000000+00:00"
    assert detail["splits"]["dev"]["finished"] == "2024-05-01T20:00:00.000000+00:00"
    assert _instant(listed["last_read"]) == datetime.fromtimestamp(last_read(str(root / name)), UTC)
    assert _instant(listed["finished"]) == max(_instant(s) for s in (
        zarr.open_group(str(root / name), mode="r")[split].attrs["finished"] for split in ("train", "dev", "test")))
    assert stored.attrs["created"] == "2024-05-01T12:00:00+0530"  # the stored stamp is unchanged


def test_an_empty_file_asked_for_a_range_is_sent_whole(served_file, tmp_path):
    """An empty file has no byte a range could name: every range was a 416, where the whole (empty) file is
    what RFC 9110 has a server send."""
    client, path, _ = served_file
    root_file = tmp_path / "root" / path.split("/")[2] / "empty.bin"
    root_file.write_bytes(b"")
    for header in ("bytes=-5", "bytes=0-", "bytes=0-0"):
        response = client.get(path.rsplit("/", 1)[0] + "/empty.bin", headers={"Range": header})
        assert response.status_code == 200 and response.content == b"", (header, response.text)
