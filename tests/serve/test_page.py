"""The page at ``/``: in a real headless Chromium (Debian's chromium and chromium-driver), the entry,
a run folder's report table and its plots are shown, every plot loaded; over plain HTTP, the read
token, escaping, the jobs' progress, and run files confined to their folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from layerfuse.experiments.report import render, table
from layerfuse.serve.state import ServerState

READ_TOKEN = "read-me"


def _record(fusion, shots, epochs, seed, f1):
    return {"config": {"fusion": fusion, "shots": shots, "epochs": epochs, "seed": seed, "lr": 1e-3},
            "best_dev_f1": f1, "test_f1_at_best": f1 - 0.05, "model": "tiny<script>", "dataset": "wnut",
            "evals": [{"step": 1, "dev_f1": f1 / 2}, {"step": 2, "dev_f1": f1}], "seconds": {"total": 1.0}}


RECORDS = [_record(f, n, 5, s, base + n / 100 + s / 10) for f, base in (("concat", 0.4), ("dwatt", 0.5))
           for n in (8, 16) for s in range(2)]


@pytest.fixture(scope="module")
def site(tiny_cache, tmp_path_factory):
    """A root holding one complete entry; a sweep's run folder (report.md and its plots) holding
    also a symlink that leads out of it; a PNG beside the folder."""
    base = tmp_path_factory.mktemp("site")
    root = base / "root"
    root.mkdir()
    shutil.copytree(tiny_cache, root / Path(tiny_cache).name)
    run = base / "sweep"
    run.mkdir()
    render(RECORDS, str(run))
    shutil.copy(run / "f1_vs_shots.png", base / "outside.png")
    os.symlink(base / "outside.png", run / "leak.png")
    return root, run


@pytest.fixture
def shot(load_script):
    """scripts/screenshot_serve_page.py: the browser and the screenshot."""
    return load_script("screenshot_serve_page")


@pytest.fixture
def server(serve, site):
    root, run = site
    return serve(root, runs=[run]).url


@pytest.fixture
def guarded(serve, site):
    root, run = site
    return serve(root, runs=[run], read_token=READ_TOKEN).url


@pytest.fixture
def browser(shot):
    if not (os.access(shot.CHROMIUM, os.X_OK) and os.access(shot.CHROMEDRIVER, os.X_OK)):
        message = f"no {shot.CHROMIUM} or {shot.CHROMEDRIVER} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must install them")
        pytest.skip(message)
    with shot.chromium() as driver:
        yield driver


@pytest.mark.slow
def test_the_page_in_a_browser(server, site, browser, shot, tmp_path, tiny_cache):
    from selenium.webdriver.common.by import By

    browser.get(server + "/")
    body = browser.find_element(By.TAG_NAME, "body").text
    assert Path(tiny_cache).name in body and "complete" in body
    assert "Sweep: tiny<script> on wnut" in body  # escaped, so shown as text

    shown = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
             for tr in browser.find_elements(By.CSS_SELECTOR, "table.report tbody tr")]
    assert shown == [[c.strip() for c in line.strip("|").split("|")] for line in table(RECORDS).splitlines()[2:]]

    images = browser.find_elements(By.CSS_SELECTOR, "figure img")
    assert sorted(img.get_attribute("alt") for img in images) == ["f1_vs_shots.png", "f1_vs_step.png"]
    for img in images:  # loaded and decoded, not a broken-image icon
        assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) > 0

    png = shot.screenshot(browser, server + "/", tmp_path / "page.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_run_files_stay_inside_their_folder(server):
    plot = httpx.get(server + "/runs/0/f1_vs_shots.png")
    assert plot.status_code == 200 and plot.headers["content-type"] == "image/png"
    assert httpx.get(server + "/runs/0/report.md").text.startswith("# Sweep")
    for path in ("/runs/0/leak.png", "/runs/0/%2E%2E/outside.png", "/runs/0/..%2Foutside.png",
                 "/runs/0/%2Fetc%2Fpasswd", "/runs/0/results.jsonl", "/runs/1/f1_vs_shots.png", "/runs/0/nothing.png"):
        assert httpx.get(server + path).status_code == 404, path


@pytest.mark.slow
def test_values_are_escaped(server):
    page = httpx.get(server + "/").text
    assert "tiny&lt;script&gt;" in page and "<script" not in page


@pytest.mark.slow
def test_a_folder_of_train_head_records(serve, site, tmp_path):
    import json

    heads = tmp_path / "heads"
    heads.mkdir()
    record = _record("scalarmix", 16, 10, 0, 0.5)
    (heads / "scalarmix-n16-e10-s0.json").write_text(json.dumps(record))
    checkpoint = {"format": "layerfuse-head", "config": record["config"], "best_dev_f1": 0.9}
    (heads / "scalarmix-n16-e10-s0.head.json").write_text(json.dumps(checkpoint))  # not a run: not counted
    page = httpx.get(serve(site[0], runs=[heads]).url + "/").text
    assert "1 run, F1" in page and "<td>scalarmix</td>" in page and "50.0 ± 0.0 (1)" in page


@pytest.mark.slow
def test_a_damaged_or_mixed_run_folder_is_one_line_on_a_page_that_stays(serve, site, tmp_path):
    """A NaN in one folder's results made the whole page a 500 (entries and jobs gone with it), and a
    folder of two entries' runs was averaged in one row where `sweep --report` refuses it."""
    import json

    damaged, mixed = tmp_path / "damaged", tmp_path / "mixed"
    damaged.mkdir()
    mixed.mkdir()
    (damaged / "results.jsonl").write_text(json.dumps({**_record("concat", 8, 5, 0, 0.5), "best_dev_f1": "NaN"})
                                           + "\n")
    for seed, key in enumerate(("a", "b")):
        (mixed / f"run{seed}.json").write_text(json.dumps({**_record("concat", 8, 5, seed, 0.5), "cache_key": key}))
    response = httpx.get(serve(site[0], runs=[damaged, mixed, site[1]]).url + "/")
    assert response.status_code == 200
    page = response.text
    assert "results.jsonl:1: run concat-n8-e5-s0" in page and "records best_dev_f1" in page
    assert "holds runs on 2 cache entries" in page
    assert "f1_vs_shots.png" in page  # the good folder is still shown


@pytest.mark.slow
def test_the_read_token(guarded):
    for path in ("/", "/runs/0/f1_vs_shots.png"):
        assert httpx.get(guarded + path).status_code == 401
        assert httpx.get(guarded + path, auth=("anyone", "wrong")).status_code == 401
        assert httpx.get(guarded + path, headers={"Authorization": f"Bearer {READ_TOKEN}"}).status_code == 200
        assert httpx.get(guarded + path, auth=("anyone", READ_TOKEN)).status_code == 200  # what a browser sends
    assert httpx.get(guarded + "/").headers["www-authenticate"].startswith("Basic")


def test_jobs_with_progress_keep_the_page_reloading(site):
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from layerfuse.serve import page

    class Queue:
        jobs = [{"id": "j2", "state": "queued", "model": "m2", "dataset": "d", "path": "/root/m2-d-5678",
                 "progress": {"split": None, "done": 0, "total": 0}, "error": None},
                {"id": "j1", "state": "running", "model": "m1", "dataset": "d", "path": "/root/m1-d-1234",
                 "progress": {"split": "train", "done": 30, "total": 120}, "error": None}]

        def list(self):
            return self.jobs

    app = Starlette(routes=page.routes())
    app.state.server = ServerState(root=site[0], token="t", queue=Queue())
    html = TestClient(app).get("/").text
    assert '<progress value="30" max="120"></progress> train: 30 / 120 (25%)' in html and "m1-d-1234" in html
    assert html.index(">j1<") < html.index(">j2<")  # running before queued
    assert 'http-equiv="refresh"' in html

    Queue.jobs = [{**Queue.jobs[1], "state": "done", "progress": {"done": 120, "total": 120}}]
    assert 'http-equiv="refresh"' not in TestClient(app).get("/").text  # nothing left to watch
