"""layerfuse used as a library inside a host's process (a notebook) leaves the host's HF state as it found
it: its own loads stay off an unreachable hub, call by call, and the host's downloads are its own."""

from __future__ import annotations

import http.server
import os
import shutil
import threading

import huggingface_hub.constants as hf_constants
import pytest

from layerfuse import hub
from layerfuse.errors import LayerfuseError
from layerfuse.extract import models


@pytest.fixture
def local_hub(monkeypatch):
    """A local HTTP server standing in for the hub (404 to every file), and the paths it was asked for."""
    asked = []

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            asked.append(self.path)
            self.send_response(404)
            self.end_headers()

        do_GET = do_HEAD

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    yield asked
    server.shutdown()


def test_an_unreachable_hub_keeps_layerfuse_off_the_network_and_leaves_the_host_online(local_hub, monkeypatch):
    """One model load while the hub was unreachable set HF_HUB_OFFLINE=1 in the environment and in
    huggingface_hub for the rest of the process: the host's own downloads failed from then on, hub back or not."""
    from huggingface_hub import hf_hub_download

    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    with pytest.raises(LayerfuseError, match="nor in the local HF cache"):
        models.load_config("someone/model")
    assert not [path for path in local_hub if "someone/model" in path]  # layerfuse asked the local HF cache only
    assert os.environ.get("HF_HUB_OFFLINE") is None and hf_constants.HF_HUB_OFFLINE is False
    with pytest.raises(OSError):  # the stand-in hub has no such file
        hf_hub_download("someone/model", "config.json")
    assert "/someone/model/resolve/main/config.json" in local_hub  # but the host's download reached it


def test_a_model_in_the_local_hf_cache_loads_whole_while_the_hub_is_unreachable(local_hub, tiny_bert_dir, tmp_path,
                                                                                monkeypatch):
    """Its config, tokenizer and weights come from the local HF cache alone, each load told so (it was the
    process-wide HF_HUB_OFFLINE=1, which the host kept)."""
    snapshot = tmp_path / "hub" / "models--someone--tiny" / "snapshots" / "abc123"
    shutil.copytree(tiny_bert_dir, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    info = models.model_info("someone/tiny")
    models.load_tokenizer(info)
    models.load_model(info, device="cpu")
    assert not [path for path in local_hub if "someone/tiny" in path]
    assert os.environ.get("HF_HUB_OFFLINE") is None and hf_constants.HF_HUB_OFFLINE is False


def test_the_hub_is_asked_again_a_minute_later(monkeypatch):
    """Whether the hub was reachable was asked once per process: a notebook that met the hub down once
    was told it was down until restarted."""
    clock, up = [1000.0], [False]

    def urlopen(request, timeout):
        if not up[0]:
            raise OSError("connection refused")

    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setattr(hub, "_answers", {})
    monkeypatch.setattr(hub.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(hub.time, "monotonic", lambda: clock[0])
    assert hub.hub_reachable() is False
    up[0] = True
    clock[0] += hub.REASK_AFTER_S / 2
    assert hub.hub_reachable() is False  # asked seconds ago: not asked again
    clock[0] += hub.REASK_AFTER_S
    assert hub.hub_reachable() is True


@pytest.fixture
def progress_bars():
    """(transformers' bars on, huggingface_hub's bars on) as a setter and getter; the session's put back after."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    def state():
        return hf_logging.is_progress_bar_enabled(), not are_progress_bars_disabled()

    def set_state(transformers_on, hub_on):
        (hf_logging.enable_progress_bar if transformers_on else hf_logging.disable_progress_bar)()
        (enable_progress_bars if hub_on else disable_progress_bars)()

    before = state()
    yield state, set_state
    set_state(*before)


@pytest.mark.parametrize("bars", [(True, True), (True, False), (False, True), (False, False)])
def test_loading_a_model_leaves_the_hosts_progress_bars_as_they_were(tiny_bert_dir, progress_bars, bars):
    """Loading the encoder (`Predictor`, `extract()`) turned transformers' and huggingface_hub's progress
    bars off for the whole process, for good: a notebook's downloads showed none after."""
    from transformers.utils import logging as hf_logging

    state, set_state = progress_bars
    set_state(*bars)
    verbosity = hf_logging.get_verbosity()
    models.load_model(models.model_info(str(tiny_bert_dir)), device="cpu")
    assert state() == bars and hf_logging.get_verbosity() == verbosity


def test_loads_in_several_threads_at_once_leave_the_hosts_settings_as_they_were(progress_bars):
    """Each load saved the host's verbosity and bars and put them back: a thread that came in while another
    was loading saved the quieted ones, and put them back last (four Predictors built at once left the host
    at ERROR, with no bars, for good): the first in, the second in, the first out, the second out."""
    import threading

    from transformers.utils import logging as hf_logging

    state, set_state = progress_bars
    set_state(True, True)
    verbosity = hf_logging.get_verbosity()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def first():  # in, then out while the second is still inside
        with models.quiet_transformers():
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def second():
        a_in.wait(10)
        with models.quiet_transformers():
            b_in.set()
            a_out.wait(10)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert state() == (True, True) and hf_logging.get_verbosity() == verbosity
