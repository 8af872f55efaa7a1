"""The extraction queue of `layerfuse serve`: identical requests join one job; refused requests
create nothing; a job cuts the root down to --max-size but keeps its entry; a server shut down or
killed mid-job finishes the entry on its next start, bit for bit; and `extract --server` follows a
job on a real server to the entry's URL."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from click.testing import CliRunner
from conftest import split_arrays, units_done
from starlette.testclient import TestClient

from layerfuse.cache.manage import list_entries
from layerfuse.cli.extract import main as extract_cli
from layerfuse.extract.run import ExtractConfig, extract
from layerfuse.serve import jobqueue
from layerfuse.serve.app import create_app
from layerfuse.serve.state import MAX_BODY_BYTES, ServerState

TOKEN = "write-me"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def body(tiny_bert_dir, tiny_conll_dir) -> dict:
    return {"model": str(tiny_bert_dir), "dataset": str(tiny_conll_dir), "splits": ["dev"]}


@pytest.fixture
def data_dirs(tiny_bert_dir, tiny_conll_dir) -> list:
    """The server's --data-dir: the dataset's folder and the model's (a model path is admitted as a dataset's)."""
    return [tiny_conll_dir, tiny_bert_dir]


def _wait(get, job_id: str, *, timeout: float = 120.0) -> dict:
    """The job once it has ended (or as it stands at the deadline); ``get``: a client's get."""
    deadline = time.monotonic() + timeout
    while True:
        job = get(f"/api/jobs/{job_id}", headers=AUTH).json()
        if job["state"] in ("done", "failed") or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


def test_identical_requests_join_one_job(body, data_dirs, tmp_path, monkeypatch):
    calls = []
    real = jobqueue.extract
    monkeypatch.setattr(jobqueue, "extract", lambda config, **kw: calls.append(config.splits) or real(config, **kw))
    app = create_app(ServerState(root=tmp_path, token=TOKEN, data_dirs=data_dirs))
    idle = TestClient(app)  # no lifespan: the queue takes requests but runs nothing yet
    first = idle.post("/api/jobs", json=body, headers=AUTH)
    second = idle.post("/api/jobs", json=body, headers=AUTH)
    other = idle.post("/api/jobs", json={**body, "splits": ["test"]}, headers=AUTH)  # same entry, another split
    assert (first.status_code, first.json()["joined"]) == (202, False), first.text
    assert (second.status_code, second.json()["joined"]) == (200, True), second.text
    assert second.json()["id"] == first.json()["id"]
    assert other.status_code == 202 and other.json()["id"] != first.json()["id"]
    assert other.json()["path"] == first.json()["path"]

    with TestClient(app) as client:  # the queue starts
        job = _wait(client.get, first.json()["id"])
        assert _wait(client.get, other.json()["id"])["state"] == "done"
        listed = client.get("/api/jobs").json()["jobs"]
    assert job["state"] == "done", job
    assert job["requests"] == 2
    assert job["progress"]["done"] == job["progress"]["total"] == job["rows"]["dev"]["total"] > 0
    assert sorted(j["id"] for j in listed) == sorted([first.json()["id"], other.json()["id"]])
    assert sorted(calls) == [("dev",), ("test",)]  # one extraction per job, none for the joined request
    [entry] = list_entries(str(tmp_path))
    assert entry.path == job["path"] and entry.splits == {"dev": True, "test": True}


def test_a_request_joins_only_a_job_that_stores_its_label_sets(body, data_dirs, tmp_path):
    # label sets do not change the entry's path: a job storing fewer sets must not answer for more
    client = TestClient(create_app(ServerState(root=tmp_path, token=TOKEN, data_dirs=data_dirs)))

    def post(**more) -> dict:
        response = client.post("/api/jobs", json={**body, **more}, headers=AUTH)
        assert response.status_code in (200, 202), response.text
        return response.json()

    only_ner = post(labels=["ner"])
    every = post()  # labels left out: every set the dataset has
    assert not every["joined"] and every["id"] != only_ner["id"] and every["path"] == only_ner["path"]
    assert post(labels=["ner"])["joined"]
    again = post()
    assert again["joined"] and again["id"] == every["id"]
    # --columns name the sets a job finds: one reading word and ner only stores no pos, whatever it asks
    words_and_ner = post(columns="word=0,ner=3", splits=["dev"])
    with_pos = post(columns="word=0,pos=1,ner=3", labels=["pos"], splits=["dev"])
    assert not with_pos["joined"] and with_pos["id"] != words_and_ner["id"]


def test_files_in_the_jobs_folder_that_are_not_jobs_are_skipped(body, data_dirs, tmp_path, caplog):
    idle = TestClient(create_app(ServerState(root=tmp_path, token=TOKEN, data_dirs=data_dirs)))
    queued = idle.post("/api/jobs", json=body, headers=AUTH).json()
    jobs = tmp_path / jobqueue.JOBS_DIR
    bad = {"empty.json": "{}", "list.json": "[1]", "no-created.json": '{"id": "no-created", "state": "queued"}',
           "other-id.json": (jobs / f"{queued['id']}.json").read_text()}
    for name, text in bad.items():
        (jobs / name).write_text(text)
    app = create_app(ServerState(root=tmp_path, token=TOKEN, data_dirs=data_dirs))  # a restart
    with TestClient(app) as client:
        assert _wait(client.get, queued["id"])["state"] == "done"
        assert [j["id"] for j in client.get("/api/jobs").json()["jobs"]] == [queued["id"]]
        assert client.post("/api/jobs", json={**body, "splits": ["test"]}, headers=AUTH).status_code == 202
    skipped = [r.getMessage() for r in caplog.records if "skipping job file" in r.getMessage()]
    assert len(skipped) == len(bad), skipped


def test_refused_requests_create_nothing(body, data_dirs, tmp_path):
    root = tmp_path / "root"
    client = TestClient(create_app(ServerState(root=root, token=TOKEN, data_dirs=data_dirs)))
    refused = [
        (401, {}, body),
        (401, {"Authorization": "Bearer wrong"}, body),
        (401, {"Authorization": TOKEN}, body),
        (400, AUTH, b"{not json"),
        (400, AUTH, b"[1, 2]"),
        (400, AUTH, b'{"dataset": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"),  # deeper than json's stack
        (400, AUTH, {**body, "cache_dir": str(tmp_path)}),  # the server's root is not the client's to choose
        (400, AUTH, {**body, "colour": "blue"}),
        (400, AUTH, {**body, "granularity": "token"}),
        (400, AUTH, {**body, "max_length": "64"}),
        (400, AUTH, {**body, "splits": "dev"}),
        (400, AUTH, {**body, "token_budget": -5}),
        (403, AUTH, {**body, "trust_remote_code": True}),
        (422, AUTH, {**body, "model": str(tmp_path / "no-such-model")}),
        (422, AUTH, {**body, "model": "nobody/no-such-model"}),  # a hub name, offline
        (422, AUTH, {**body, "dataset": str(tmp_path / "no-such-data")}),
        (422, AUTH, {**body, "splits": ["nope"]}),
        (422, AUTH, {**body, "max_length": 10_000}),
    ]
    for status, headers, payload in refused:
        content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        response = client.post("/api/jobs", content=content, headers={**headers, "Content-Type": "application/json"})
        assert response.status_code == status, (payload, response.text)
        error = response.json()["error"]
        assert error and "\n" not in error, error
    oversized = client.post("/api/jobs", json={**body, "dataset": "x" * MAX_BODY_BYTES}, headers=AUTH)
    assert oversized.status_code == 413
    assert client.get("/api/jobs/0123456789ab").status_code == 404
    assert client.get("/api/jobs").json() == {"jobs": []}
    assert not root.exists() or not any(root.iterdir())  # no job file, no entry, no lock


def test_reads_need_the_read_token_when_the_server_has_one(tmp_path):
    client = TestClient(create_app(ServerState(root=tmp_path, token=TOKEN, read_token="read-me")))
    assert client.get("/api/jobs").status_code == 401
    assert client.get("/api/jobs", headers={"Authorization": "Bearer read-me"}).json() == {"jobs": []}
    assert client.get("/api/jobs", headers=AUTH).status_code == 200


def test_a_job_cuts_the_root_down_to_max_size_and_spares_its_entry(tiny_cache, body, data_dirs, tmp_path, caplog):
    old = tmp_path / Path(tiny_cache).name  # complete, never read: the first to go
    shutil.copytree(tiny_cache, old)
    state = ServerState(root=tmp_path, token=TOKEN, max_size=1, data_dirs=data_dirs)
    with TestClient(create_app(state)) as client:
        submitted = client.post("/api/jobs", json={**body, "dtype": "float32"}, headers=AUTH)
        job = _wait(client.get, submitted.json()["id"])
    assert job["state"] == "done", job
    assert [e.path for e in list_entries(str(tmp_path))] == [job["path"]]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("--max-size:")]
    assert any(f"removed {old} (" in m for m in said), said  # an eviction said nothing before
    assert any("still over the limit" in m for m in said), said  # its own entry stays, over 1 byte


# A server whose writer pauses after each unit (as tests/extract/test_resume.py slows extract), so
# the test can kill it between units; the product code is the one `layerfuse serve` runs.
SLOW_SERVER = textwrap.dedent(
    """
    import sys, time
    from layerfuse.cache import writer
    original = writer.SplitWriter.write_unit
    def slow(self, unit, rows):
        original(self, unit, rows)
        time.sleep(1.0)
    writer.SplitWriter.write_unit = slow
    import uvicorn
    from layerfuse.serve.app import create_app
    from layerfuse.serve.state import ServerState
    root, token, port, data = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]  # argv[5]: the model's
    state = ServerState(root=root, token=token, data_dirs=[data, sys.argv[5]])
    uvicorn.run(create_app(state), host="127.0.0.1", port=port, log_level="warning")
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




@pytest.mark.slow
def test_server_killed_mid_job_resumes_it_bit_for_bit(tiny_bert_dir, tiny_conll_dir, data_dirs, tmp_path):
    options = {"model": str(tiny_bert_dir), "dataset": str(tiny_conll_dir), "splits": ["train"], "unit_rows": 256}
    reference = extract(ExtractConfig(**{**options, "splits": ("train",)}, cache_dir=str(tmp_path / "ref")),
                        progress=False, log=lambda m: None).path
    root, port = tmp_path / "root", _free_port()
    url = f"http://127.0.0.1:{port}"
    child = subprocess.Popen([sys.executable, "-c", SLOW_SERVER, str(root), TOKEN, str(port), str(tiny_conll_dir),
                              str(tiny_bert_dir)],
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                submitted = httpx.post(f"{url}/api/jobs", json=options, headers=AUTH, timeout=30)
                break
            except httpx.TransportError:
                assert child.poll() is None and time.monotonic() < deadline, "the server never came up"
                time.sleep(0.1)
        assert submitted.status_code == 202, submitted.text
        job = submitted.json()
        while units_done(job["path"]) < 1 and child.poll() is None and time.monotonic() < deadline + 60:
            time.sleep(0.01)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert 0 < units_done(job["path"]) < 5, "the job finished or never started; the kill proved nothing"
    assert json.loads((root / jobqueue.JOBS_DIR / f"{job['id']}.json").read_text())["state"] == "running"

    with TestClient(create_app(ServerState(root=root, token=TOKEN, data_dirs=data_dirs))) as client:  # restarted
        resumed = _wait(client.get, job["id"])
    assert resumed["state"] == "done", resumed
    assert resumed["path"] == job["path"] and Path(job["path"]).name == Path(reference).name
    got, want = split_arrays(job["path"]), split_arrays(reference)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_shutdown_stops_the_job_between_units_and_the_next_start_finishes_it(tiny_bert_dir, tiny_conll_dir, data_dirs,
                                                                             tmp_path, monkeypatch):
    from layerfuse.cache import writer

    original = writer.SplitWriter.write_unit
    monkeypatch.setattr(writer.SplitWriter, "write_unit", lambda self, *a: (original(self, *a), time.sleep(0.2)))
    options = {"model": str(tiny_bert_dir), "dataset": str(tiny_conll_dir), "splits": ["train"], "unit_rows": 256}
    app = create_app(ServerState(root=tmp_path, token=TOKEN, data_dirs=data_dirs))
    with TestClient(app) as client:
        job = client.post("/api/jobs", json=options, headers=AUTH).json()
        while client.get(f"/api/jobs/{job['id']}").json()["progress"]["done"] == 0:
            time.sleep(0.01)
    stopped = json.loads((tmp_path / jobqueue.JOBS_DIR / f"{job['id']}.json").read_text())
    assert stopped["state"] == "queued" and 0 < units_done(job["path"]) < 5, stopped
    with TestClient(app) as client:
        assert _wait(client.get, job["id"])["state"] == "done"
    assert units_done(job["path"]) == 5


@pytest.mark.slow
def test_extract_server_prints_the_entry_url(serve, tiny_bert_dir, tiny_conll_dir, data_dirs, tmp_path):
    root, token_file = tmp_path / "root", tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    broken = tmp_path / "broken-bert"  # its config reads, its weights do not: the job fails on the server
    shutil.copytree(tiny_bert_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    args = ["--dataset", str(tiny_conll_dir), "--splits", "dev", "--quiet"]
    url = serve(root, token=TOKEN, data_dirs=[*data_dirs, broken]).url
    done = CliRunner().invoke(extract_cli, ["--server", url, "--token-file", str(token_file),
                                            "--model", str(tiny_bert_dir), *args])
    refused = CliRunner().invoke(extract_cli, ["--server", url, "--model", str(tiny_bert_dir), *args])
    failed = CliRunner().invoke(extract_cli, ["--server", url, "--token-file", str(token_file),
                                              "--model", str(broken), *args])
    served = httpx.get(done.stdout.strip() + "/zarr.json", timeout=30)
    assert done.exit_code == 0, done.output
    [entry] = list_entries(str(root))
    assert entry.complete
    assert done.stdout.strip() == f"{url}/entries/{Path(entry.path).name}"
    assert served.status_code == 200 and served.json()["attributes"]["key"] == Path(entry.path).name.split("__")[-1]
    assert refused.exit_code == 1 and "401" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert failed.exit_code == 1, failed.output
    assert failed.stderr.strip().splitlines()[-1].startswith("error: job "), failed.stderr
    assert "failed" in failed.stderr.strip().splitlines()[-1]


def test_extract_server_reads_the_columns_it_is_given(serve, tiny_bert_dir, tmp_path):
    """--columns (and the HF fields) travel with the job: the server reads the dataset as the command
    says, and makes the entry a local extract with the same columns makes."""
    from conftest import make_sentences, write_conll

    from layerfuse.cache.reader import open_entry

    data = tmp_path / "tags-in-column-1"  # word, tag, then a column of O the default (the last) would read
    data.mkdir()
    for split, seed in (("train", 1), ("dev", 2)):
        write_conll(data / f"{split}.txt", make_sentences(20, seed=seed), line=lambda word, tag: f"{word} {tag} O")
    root, token_file = tmp_path / "root", tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    url = serve(root, token=TOKEN, data_dirs=[data, tiny_bert_dir]).url
    args = ["--model", str(tiny_bert_dir), "--dataset", str(data), "--splits", "dev", "--columns", "word=0,ner=1",
            "--quiet"]
    done = CliRunner().invoke(extract_cli, ["--server", url, "--token-file", str(token_file), *args])
    assert done.exit_code == 0, done.output
    [served] = list_entries(str(root))
    assert "PER" in {name.split("-", 1)[-1] for name in open_entry(served.path).label_names}  # not only O
    local = CliRunner().invoke(extract_cli, [*args, "--cache-dir", str(tmp_path / "local")])
    assert local.exit_code == 0, local.output
    [here] = list_entries(str(tmp_path / "local"))
    assert Path(here.path).name == Path(served.path).name  # the same entry, read the same way


@pytest.mark.parametrize("server", ["gpu-box", "localhost:8731", "http://[::1", "ftp://gpu-box", "http://gpu-box:port"])
def test_a_server_that_is_not_a_url_is_one_line(server, tiny_conll_dir, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    result = CliRunner().invoke(extract_cli, ["--server", server, "--token-file", str(token_file),
                                              "--dataset", str(tiny_conll_dir)])
    assert result.exit_code == 2, result.output  # a wrong call, as click's own checks end
    wanted = f"Error: --server wants the server's URL, such as http://gpu-box:8731, not {server!r}"
    assert result.stderr.strip().splitlines()[-1] == wanted



def test_only_the_newest_ended_jobs_are_kept(body, data_dirs, tmp_path, monkeypatch):
    """Every request for an entry already made adds a job (what `extract --server` sends): all were kept for
    good, in memory, in ``.jobs/``, in /api/jobs and on the page."""
    monkeypatch.setattr(jobqueue, "KEEP_ENDED", 3)
    idle = TestClient(create_app(ServerState(root=tmp_path, token=TOKEN, data_dirs=data_dirs)))
    queued = idle.post("/api/jobs", json=body, headers=AUTH).json()
    jobs = tmp_path / jobqueue.JOBS_DIR
    template = json.loads((jobs / f"{queued['id']}.json").read_text())
    ended = [f"old{i}" for i in range(5)]  # ended in this order, old0 first
    for i, job_id in enumerate(ended):
        stamp = f"2026-01-0{i + 1}T00:00:00.000000+00:00"
        (jobs / f"{job_id}.json").write_text(json.dumps({**template, "id": job_id, "state": "done",
                                                         "created": stamp, "finished": stamp}))
    app = create_app(ServerState(root=tmp_path, token=TOKEN, data_dirs=data_dirs))  # a restart
    with TestClient(app) as client:
        listed = {j["id"] for j in client.get("/api/jobs").json()["jobs"]}
        assert listed == {queued["id"], "old2", "old3", "old4"}
        assert _wait(client.get, queued["id"])["state"] == "done"  # one more ended: the oldest goes
        assert {j["id"] for j in client.get("/api/jobs").json()["jobs"]} == {queued["id"], "old3", "old4"}
    assert sorted(p.stem for p in jobs.glob("*.json")) == sorted([queued["id"], "old3", "old4"])


def test_a_method_the_jobs_endpoint_does_not_take_is_told_both_it_takes(tmp_path):
    """As two routes, a 405 on /api/jobs named POST alone in its Allow header, though GET lists the jobs."""
    client = TestClient(create_app(ServerState(root=tmp_path, token=TOKEN)))
    refused = client.request("DELETE", "/api/jobs")
    assert refused.status_code == 405
    assert {m.strip() for m in refused.headers["allow"].split(",")} >= {"GET", "POST"}
    assert client.get("/api/jobs").json() == {"jobs": []}


def test_an_entry_url_with_a_trailing_slash_reads_as_without(serve, tiny_cache, tmp_path):
    """`info http://.../entries/E/` listed ``E//``, which the server refused: "answered 403 Forbidden"."""
    root = tmp_path / "root"
    shutil.copytree(tiny_cache, root / os.path.basename(tiny_cache))
    server = serve(root)
    from layerfuse.cli.cache import info_cmd

    result = CliRunner().invoke(info_cmd, [f"{server.url}/entries/{os.path.basename(tiny_cache)}/"])
    assert result.exit_code == 0, result.output
    assert "MISSING" not in result.output


def test_errors_starlette_answers_itself_are_json_like_every_other(tiny_cache, tmp_path):
    """A body over the limit (413), a foreign Host (400) and a range past a file's end (416) were answered in
    plain text, while every other error of the API is {"error": ...}."""
    root = tmp_path / "root"
    name = os.path.basename(tiny_cache)
    shutil.copytree(tiny_cache, root / name)
    client = TestClient(create_app(ServerState(root=root, token=TOKEN, hosts=("testserver",))))
    big = client.post("/api/jobs", content=b"x" * (MAX_BODY_BYTES + 1), headers=AUTH)
    size = os.path.getsize(root / name / "zarr.json")
    past = client.get(f"/entries/{name}/zarr.json", headers={"Range": f"bytes={size + 10}-{size + 20}"})
    foreign = client.get("/api/entries", headers={"Host": "evil.example"})
    for response, status in ((big, 413), (past, 416), (foreign, 400)):
        assert response.status_code == status
        assert response.headers["content-type"] == "application/json"
        assert set(response.json()) == {"error"} and response.json()["error"]
    assert past.headers["content-range"] == f"bytes */{size}"  # the other headers kept
    assert client.get(f"/entries/{name}/zarr.json").json()["zarr_format"] == 3  # the rest unchanged
