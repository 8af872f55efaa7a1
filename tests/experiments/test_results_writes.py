"""What a sweep writes survives a full disk and a second sweep: a results line is written whole or the
sweep fails naming the file (a short write was a line silently cut, the run missing from the report), a
run is recorded once however many sweeps ran it, a kept head's run record is never left empty, and one
damaged by other means is named in one line (it was a traceback on every rerun)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from layerfuse.errors import LayerfuseError
from layerfuse.experiments.heads import kept_heads
from layerfuse.experiments.results import append_result, read_results
from layerfuse.files import write_json

RECORD = {"run_id": "concat-n2-e1-s0-abc", "config": {"fusion": "concat", "shots": 2, "epochs": 1, "seed": 0},
          "best_dev_f1": 0.5, "pad": "x" * 4000}


def test_a_run_already_in_the_file_is_not_written_again(tmp_path):
    path = str(tmp_path / "results.jsonl")
    assert append_result(path, RECORD)
    assert not append_result(path, {**RECORD, "best_dev_f1": 0.6})  # a second sweep that ran it too
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["best_dev_f1"] == 0.5
    assert append_result(path, {**RECORD, "run_id": "concat-n2-e1-s1-def"})


def test_a_short_write_is_an_error_naming_the_file(tmp_path):
    """Under a file size limit (`ulimit -f`) the line is cut: the sweep must fail, naming results.jsonl."""
    path = tmp_path / "results.jsonl"
    code = f"""
import json, resource
from layerfuse.experiments.results import append_result
resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
try:
    append_result({str(path)!r}, json.loads({json.dumps(json.dumps(RECORD))}))
except OSError as exc:
    print("OSError", exc.filename, exc.strerror)
else:
    print("written")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split(None, 2)[:2] == ["OSError", str(path)], out.stdout + out.stderr
    assert read_results(str(path)) == {}  # the cut line is never read as a run
    assert append_result(str(path), RECORD)  # the rerun records it, on a line of its own
    assert len(read_results(str(path))) == 1


def test_write_json_leaves_the_old_file_when_the_new_one_cannot_be_written(tmp_path):
    path = tmp_path / "run.json"
    write_json(str(path), {"kept": 1})
    with pytest.raises(TypeError):
        write_json(str(path), {"kept": object()})  # fails halfway through the dump
    assert json.loads(path.read_text()) == {"kept": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_a_damaged_kept_head_record_is_named_in_one_line(tmp_path):
    heads = tmp_path / "heads"
    heads.mkdir()
    (heads / "concat-n2-e1-s0-abc.json").write_text("")  # emptied: a full disk under an older version
    with pytest.raises(LayerfuseError, match=r"concat-n2-e1-s0-abc\.json is not a kept head's run record"):
        kept_heads(str(heads))


@pytest.mark.parametrize("run, head", [("../../victim/concat-n4-e3-s0", "concat-n4-e3-s0.head.safetensors"),
                                       ("/tmp/victim/concat-n4-e3-s0", "concat-n4-e3-s0.head.safetensors"),
                                       ("concat-n4-e3-s0", "../../elsewhere.head.safetensors")])
def test_a_kept_head_record_names_only_its_own_run_and_a_head_beside_it(tmp_path, run, head):
    """A record's run id and head name become paths: a sweep deletes beaten heads by run id, export reads the
    best; an edited record ("../../victim/...") deleted and read files outside the sweep's folder."""
    heads = tmp_path / "heads"
    heads.mkdir()
    (heads / "concat-n4-e3-s0.json").write_text(json.dumps({"run_id": run, "checkpoint": head}))
    with pytest.raises(LayerfuseError, match="not its own run and a file beside it: it was edited"):
        kept_heads(str(heads))


@pytest.mark.parametrize("field, value", [("best_dev_f1", float("nan")), ("test_f1_at_best", 1e9),
                                          ("seconds", {"total": -500})])
def test_a_record_no_run_can_have_is_named(tmp_path, field, value):
    """An edited results.jsonl made the report print "nan ± nan" and an F1 of 5e10 as results."""
    config = {"fusion": "concat", "shots": 4, "epochs": 2, "seed": 0}
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"config": config, "best_dev_f1": 0.5}) + "\n"
                    + json.dumps({"config": {**config, "seed": 1}, "best_dev_f1": 0.5, field: value}) + "\n")
    with pytest.raises(LayerfuseError, match=rf"results.jsonl:2: run .* records {field}"):
        read_results(str(path))


def _line(**changes) -> str:
    record = {"config": {"fusion": "concat", "shots": 2, "epochs": 1, "seed": 0, "lr": 1e-3},
              "best_dev_f1": 0.5, "evals": [], "seconds": {"total": 1.0}}
    for key, value in changes.items():
        if key.startswith("config_"):
            record["config"][key[len("config_"):]] = value
        elif value is None:
            record.pop(key)
        else:
            record[key] = value
    return json.dumps(record) + "\n"


@pytest.mark.parametrize("changes, said", [
    # a newer release's setting: named in no run id here, so it overwrote the run without it, or joined its row
    (dict(config_label_smoothing=0.1), "setting label_smoothing, which this release does not know"),
    (dict(config_shots="4"), "config.shots = '4'"),  # the report sorted text against numbers: a traceback
    (dict(config_lr="0.01"), "config.lr = '0.01'"),
    (dict(best_dev_f1=None), "no best dev score"),
    (dict(seconds=3), "seconds = 3"),
])
def test_a_record_the_report_cannot_read_is_one_line_naming_it(tmp_path, changes, said):
    path = tmp_path / "results.jsonl"
    path.write_text(_line() + _line(config_seed=1, **changes))
    with pytest.raises(LayerfuseError, match=f"results.jsonl:2: .*{said}"):
        read_results(str(path))
    path.write_text(_line(config_shots="all"))  # as --shots all may have been written: read as all of train
    assert len(read_results(str(path))) == 1


def test_a_fusion_not_registered_here_keeps_its_own_settings(tmp_path):
    """A user's fusion, defined in their code, is not registered in a `sweep --report` process: its option
    was refused as a newer release's setting, and the report of its sweep failed."""
    path = tmp_path / "results.jsonl"
    path.write_text(_line(config_fusion="weighted", config_gain=0.5) + _line(config_fusion="weighted", config_gain=0.5,
                                                                            config_seed=1))
    assert len(read_results(str(path))) == 2
    # two of its runs that differ only in that option are one run id here: refused, not one kept in silence
    path.write_text(_line(config_fusion="weighted", config_gain=0.5) + _line(config_fusion="weighted", config_gain=2.0))
    with pytest.raises(LayerfuseError, match="results.jsonl:2: runs of fusion 'weighted', which this process has not "
                                             "registered, differ only in gain"):
        read_results(str(path))


def test_a_whole_last_record_without_its_newline_is_named(tmp_path):
    """An editor that drops the final newline made the last run vanish from the report without a word."""
    path = tmp_path / "results.jsonl"
    path.write_text(_line() + _line(config_seed=1).rstrip("\n"))
    said = []
    assert len(read_results(str(path), skipped=said.append)) == 1
    assert said and "results.jsonl:2: left out: the last line has no newline" in said[0]
    path.write_text(_line() + _line(config_seed=1)[:30])  # cut short by a kill, maybe being written: silence
    said.clear()
    assert len(read_results(str(path), skipped=said.append)) == 1 and not said


def _results(folder) -> str:
    path = str(folder / "results.jsonl")
    append_result(path, RECORD)
    return path


def _claim(folder) -> str:
    from layerfuse.experiments.claims import Claims

    claims = Claims(str(folder))
    assert claims.claim("run")
    return claims._path("run")


def _folder_lock(folder) -> str:
    from layerfuse.files import LOCK_FILE, folder_locked

    with folder_locked(str(folder)):
        return str(folder / LOCK_FILE)


def _server_lock(folder) -> str:
    from layerfuse.cli.serve import SERVER_LOCK, _only_server
    from layerfuse.serve.jobqueue import JOBS_DIR

    os.close(_only_server(folder))
    return str(folder / JOBS_DIR / SERVER_LOCK)


@pytest.mark.parametrize("make", [_results, _claim, _folder_lock, _server_lock])
def test_files_of_a_shared_folder_take_the_mode_the_umask_gives(tmp_path, make):
    """Results, claims and locks were made 0o644 (the server's lock 0o600) whatever the umask: under umask 002
    a colleague of the group could not append to a shared sweep's results.jsonl, claim a run, or take a lock."""
    old = os.umask(0o002)
    try:
        path = make(tmp_path)
    finally:
        os.umask(old)
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o664)


def _strict(text: str):
    """``text`` read as JSON by a reader that, unlike Python's, refuses NaN and Infinity."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_run_whose_loss_went_nan_is_written_as_valid_json_and_still_reads_as_diverged(tmp_path):
    """A results line and a run record held ``"dev_loss": NaN``, which JSON has not: jq, a browser or pandas
    refused the whole file."""
    from layerfuse.experiments.results import diverged

    nan, inf = float("nan"), float("inf")
    lost = {**RECORD, "evals": [{"step": 1, "train_loss": 0.7, "dev_loss": 1.0},
                                {"step": 2, "train_loss": nan, "dev_loss": inf}],
            "layer_usage": {"layers": [1, 2], "share": [nan, nan]}}
    path = tmp_path / "results.jsonl"
    append_result(str(path), lost)
    write_json(str(tmp_path / "run.json"), lost)  # a train-head record, a kept head's
    for text in (path.read_text(), (tmp_path / "run.json").read_text()):
        written = _strict(text)
        assert written["evals"][1] == {"step": 2, "train_loss": None, "dev_loss": None}
        assert written["layer_usage"]["share"] == [None, None]
    assert [diverged(r) for r in read_results(str(path)).values()] == [True]
    # a line an earlier release wrote with NaN is still read, and still diverged
    older = tmp_path / "older.jsonl"
    older.write_text(json.dumps(lost) + "\n")
    assert "NaN" in older.read_text() and [diverged(r) for r in read_results(str(older)).values()] == [True]


def test_an_mlm_run_whose_perplexity_overflowed_is_read_back_as_the_worst(tmp_path):
    """A dev loss past exp's range gives perplexity inf, written null: the whole results file was then refused
    ("records no best dev score"), and the report took the run for an F1 one."""
    from layerfuse.experiments.results import scored_by

    path = tmp_path / "results.jsonl"
    config = {"fusion": "concat", "shots": 8, "epochs": 1, "task": "mlm"}
    for seed, loss in ((0, 2.0), (1, 800.0)):
        append_result(str(path), {"config": {**config, "seed": seed}, "best_dev_loss": loss,
                                  "best_dev_ppl": math.exp(min(loss, 700)) if loss < 700 else math.inf,
                                  "test_ppl_at_best": math.inf})
    assert '"best_dev_ppl": null' in path.read_text()
    records = sorted(read_results(str(path)).values(), key=lambda r: r["config"]["seed"])
    assert [r["best_dev_ppl"] for r in records] == [math.exp(2.0), math.inf]
    assert {scored_by(r) for r in records} == {"perplexity"}


def test_a_null_training_loss_is_diverged_after_a_step_but_not_at_step_0():
    """An evaluation at step 0 (a run of no steps) has no training loss: null there is no divergence."""
    from layerfuse.training.config import diverged_at

    assert diverged_at([{"step": 0, "train_loss": None, "dev_loss": 1.0}]) is None
    assert diverged_at([{"step": 3, "train_loss": None, "dev_loss": 1.0}])["step"] == 3
    assert diverged_at([{"step": 3, "train_loss": 0.5, "dev_loss": None}])["step"] == 3
    assert diverged_at([{"step": 3, "dev_f1": 0.5}]) is None  # records written without the losses
