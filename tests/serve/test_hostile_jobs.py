"""Hostile job bodies, sent with the write token: a dataset or model path outside the server's data
directories (a secret file, the server's own token file, a symlink out of a data directory), a
malformed file or model config inside one, a label set the dataset lacks, a unit size of one row.
Each is a 422 with one line that quotes no file, and no job is queued."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from starlette.testclient import TestClient

from layerfuse.serve.app import create_app
from layerfuse.serve.state import ServerState

TOKEN = "write-token-of-the-hostile-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = "root:$6$s3cr3t-hash:19000:0:99999:7:::"  # the first line of a file the server must not quote


@pytest.fixture
def setup(tmp_path, tiny_bert_dir, tiny_conll_dir):
    data, root = tmp_path / "data", tmp_path / "root"
    shutil.copytree(tiny_conll_dir, data / "conll")
    shutil.copytree(tiny_bert_dir, data / "bert")  # a model path is admitted as a dataset path is
    (data / "bad").mkdir()
    (data / "bad" / "train.txt").write_text(SECRET + "\n")  # inside a data dir, but no dataset
    (tmp_path / "shadow").write_text(SECRET + "\n")
    (data / "escape").symlink_to(tmp_path / "shadow")
    root.mkdir()
    (root / ".serve-token").write_text(TOKEN + "\n")
    state = ServerState(root=root, token=TOKEN, data_dirs=[data], private=[root / ".serve-token"])
    body = {"model": str(data / "bert"), "dataset": str(data / "conll"), "splits": ["dev"]}
    return TestClient(create_app(state)), body, tmp_path


def _post(client, body):
    return client.post("/api/jobs", json=body, headers=AUTH)


def test_dataset_paths_outside_the_data_dirs_are_refused_unquoted(setup):
    client, body, tmp = setup
    hostile = [str(tmp / "shadow"), str(tmp / "root" / ".serve-token"), str(tmp / "data" / "escape"),
               str(tmp / "data" / "bad"), str(tmp / "data" / ".." / "shadow"), "/etc/passwd"]
    for dataset in hostile:
        response = _post(client, {**body, "dataset": dataset})
        error = response.json().get("error", "")
        assert response.status_code == 422, (dataset, response.text)
        assert "\n" not in error and "s3cr3t" not in response.text and TOKEN not in response.text, response.text
        assert "root:" not in response.text, response.text
    assert client.get("/api/jobs", headers=AUTH).json() == {"jobs": []}


def test_without_data_dirs_no_path_is_read(setup, tmp_path):
    client, body, _ = setup
    client.app.state.server.data_dirs = []
    response = _post(client, body)
    assert response.status_code == 422 and "--data-dir" in response.json()["error"], response.text


def test_a_dataset_under_a_data_dir_is_accepted(setup):
    client, body, _ = setup
    response = _post(client, body)
    assert response.status_code == 202, response.text


@pytest.mark.parametrize("option", [{"labels": ["no-such-set"]}, {"unit_rows": 1}, {"unit_rows": 1 << 30}])
def test_options_are_checked_before_a_job_is_accepted(setup, option):
    client, body, _ = setup
    response = _post(client, {**body, **option})
    assert response.status_code == 422, response.text
    assert "\n" not in response.json()["error"] and list(option)[0] in response.json()["error"], response.text
    assert client.get("/api/jobs", headers=AUTH).json() == {"jobs": []}


def test_serve_takes_data_dirs_and_keeps_its_tokens_private(tmp_path, monkeypatch):
    import uvicorn
    from click.testing import CliRunner

    from layerfuse.cli.main import main

    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append(app.state.server))
    root, a, b = tmp_path / "root", tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    plain = CliRunner().invoke(main, ["serve", "--cache-dir", str(root), "--port", "0"])
    given = CliRunner().invoke(main, ["serve", "--cache-dir", str(root), "--port", "0", "--data-dir", str(a),
                                      "--data-dir", str(b)])
    missing = CliRunner().invoke(main, ["serve", "--cache-dir", str(root), "--data-dir", str(tmp_path / "nope")])
    assert plain.exit_code == 0 and given.exit_code == 0, plain.output + given.output
    assert calls[0].data_dirs == [] and calls[1].data_dirs == [a.resolve(), b.resolve()]
    assert calls[1].private == [(root / ".serve-token").resolve()]
    assert missing.exit_code != 0 and "nope" in missing.output and len(calls) == 2


def test_a_queued_job_is_admitted_again_when_it_runs(setup):
    client, body, tmp = setup
    queued = _post(client, body)  # no lifespan: queued, not run
    assert queued.status_code == 202, queued.text
    restarted = ServerState(root=tmp / "root", token=TOKEN)  # started again without --data-dir
    with TestClient(create_app(restarted)) as again:
        for _ in range(200):
            job = again.get(f"/api/jobs/{queued.json()['id']}", headers=AUTH).json()
            if job["state"] in ("done", "failed"):
                break
            time.sleep(0.05)
    assert job["state"] == "failed" and "--data-dir" in job["error"], job
    assert not os.path.exists(job["path"])


def _outside_model(tmp):
    """A model folder outside every data directory whose config's value transformers would quote."""
    folder = tmp / "outside-model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "SECRET_TYPE"}')
    return folder


def test_model_paths_outside_the_data_dirs_are_refused_unquoted(setup):
    client, body, tmp = setup
    outside = _outside_model(tmp)
    hostile = [str(outside), str(tmp / "shadow"), str(tmp / "root" / ".serve-token"), str(tmp / "root"),
               str(tmp / "data" / "escape"), str(tmp / "data" / ".." / "outside-model"), "/etc/passwd",
               "/etc/no-such-file", "/", "./outside-model", "~/no-such-model"]
    errors = {}
    for model in hostile:
        response = _post(client, {**body, "model": model})
        errors[model] = error = response.json().get("error", "")
        assert response.status_code == 422, (model, response.text)
        assert "\n" not in error and "s3cr3t" not in response.text and TOKEN not in response.text, response.text
        assert "SECRET_TYPE" not in response.text and "root:" not in response.text, response.text
        assert "not under a data directory" in error or "server's own files" in error, error
    # a file that is there and one that is not are answered alike: the answer tells nothing of the disk
    assert errors["/etc/passwd"].replace("/etc/passwd", "X") == errors["/etc/no-such-file"].replace(
        "/etc/no-such-file", "X")
    assert client.get("/api/jobs", headers=AUTH).json() == {"jobs": []}


def test_model_names_are_no_paths_and_pass_admission(tmp_path):
    from layerfuse.serve.admit import Refusal, check_model

    where = {"data_dirs": [tmp_path / "data"], "root": tmp_path / "root"}
    for name in (None, "all-MiniLM-L6-v2", "bert-base-cased", "sentence-transformers/all-MiniLM-L6-v2"):
        check_model(name, **where)  # the readers resolve names; nothing is refused
    for path in ("/etc", "./model", "../model", "~/model", "a/b/c", "model\\x", "bad\0name"):
        with pytest.raises(Refusal, match="model"):
            check_model(path, **where)


@pytest.mark.parametrize("config", ['{"model_type": "bert", "hidden_size": "x-secret"}',
                                    '{"model_type": "SECRET_TYPE"}', '{"model_type": "bert", "num_hidden_layers": [1]}',
                                    '{"model_type": "bert", "hidden_size": 32, "oops":'])
def test_a_model_config_that_does_not_load_is_a_422_quoting_nothing(setup, config):
    client, body, tmp = setup
    model = tmp / "data" / "odd-model"
    model.mkdir()
    (model / "config.json").write_text(config)
    response = _post(client, {**body, "model": str(model)})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error.startswith("cannot read the model's config: ") and "\n" not in error, error
    assert "secret" not in response.text.lower() and "[1]" not in response.text, response.text
    assert client.get("/api/jobs", headers=AUTH).json() == {"jobs": []}


@pytest.mark.parametrize("columns", [{}, {"columns": "word=0,ner=1"}])
def test_a_malformed_line_is_answered_with_its_location_only(setup, columns):
    client, body, tmp = setup
    notes = tmp / "data" / "notes.txt"
    notes.write_text("db_password hunter2\n")
    response = _post(client, {**body, "dataset": str(notes), **columns})
    assert response.status_code == 422, response.text
    assert "hunter2" not in response.text and "db_password" not in response.text, response.text
    wanted = f"{notes}:1: not a dataset this server can read (the server's log has the reason)"
    assert response.json()["error"] == wanted, response.text


def test_without_contents_keeps_the_location_of_any_line_error():
    from layerfuse.serve.admit import without_contents

    redacted = "d/f.txt:3: not a dataset this server can read (the server's log has the reason)"
    for message in ("d/f.txt:3: a token line without a tag: 'secret'",
                    "d/f.txt:3 (--columns ner=1): malformed tag 'secret': want B-X",
                    "d/f.txt:3 (--columns ner=1): x (y): 'secret'"):
        assert without_contents(message) == redacted, message
    assert without_contents("dataset 'x' does not exist") == "dataset 'x' does not exist"
