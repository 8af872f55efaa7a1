"""`layerfuse serve`'s first line names the address it serves, and a root that cannot be one is one line."""

from __future__ import annotations

import re

import pytest
from cli_output import one_error_line
from click.testing import CliRunner

from layerfuse.cli.main import main

pytest.importorskip("uvicorn")


def test_port_0_names_the_port_it_serves_on(tmp_path, monkeypatch):
    """The banner said http://127.0.0.1:0/; the port was only in uvicorn's own line."""
    import uvicorn

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(kw["port"]))
    result = CliRunner().invoke(main, ["serve", "--cache-dir", str(tmp_path / "root"), "--port", "0"])
    assert result.exit_code == 0, result.output
    [port] = served
    assert port > 0 and re.search(rf"on http://127\.0\.0\.1:{port}/ ", result.stderr), result.stderr


def test_a_root_that_is_a_file_is_one_line(tmp_path):
    """It said "File exists (PATH)"."""
    path = tmp_path / "a-file"
    path.write_text("x")
    line = one_error_line(CliRunner().invoke(main, ["serve", "--cache-dir", str(path)]))
    assert f"--cache-dir {path} is not a directory" in line


def test_an_ipv6_address_is_bracketed_and_a_loopback_server_answers_loopback_names_only(tmp_path, monkeypatch):
    """http://::1:PORT/ is no URL; a page elsewhere that rebinds its name to 127.0.0.1 sends that name as
    Host, and a loopback server (reads open by default) answered it."""
    import socket

    import uvicorn
    from starlette.testclient import TestClient

    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append((app, kw["port"])))
    result = CliRunner().invoke(main, ["serve", "--cache-dir", str(tmp_path / "root"), "--host", "::1",
                                       "--port", "0"])
    if result.exit_code != 0 and "Cannot assign requested address" in str(result.exception):
        pytest.skip("::1 cannot be bound here")
    assert result.exit_code == 0, result.output
    [(app, port)] = served
    assert f"on http://[::1]:{port}/ " in result.stderr, result.stderr
    for host, status in (("127.0.0.1:8000", 200), ("localhost", 200), ("[::1]:8000", 200), ("evil.example", 400)):
        assert TestClient(app).get("/api/entries", headers={"Host": host}).status_code == status, host


def test_a_server_on_another_loopback_address_answers_its_own_name(tmp_path, monkeypatch):
    """--host 127.0.0.2 answered 400 at the URL its own banner printed."""
    import uvicorn
    from starlette.testclient import TestClient

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(app))
    monkeypatch.setattr("layerfuse.cli.serve._port_to_listen", lambda host, port: 18777)
    result = CliRunner().invoke(main, ["serve", "--cache-dir", str(tmp_path / "root"), "--host", "127.0.0.2"])
    assert result.exit_code == 0, result.output
    [app] = served
    assert TestClient(app).get("/api/entries", headers={"Host": "127.0.0.2:18777"}).status_code == 200
    assert TestClient(app).get("/api/entries", headers={"Host": "evil.example"}).status_code == 400


def test_a_port_in_use_is_one_line_before_the_banner(tmp_path, monkeypatch):
    """A busy --port printed "serving ... on http://..." and started the job queue, then failed to bind."""
    import socket

    import uvicorn

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(app))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["serve", "--cache-dir", str(tmp_path / "root"), "--port", str(port)])
    assert result.exit_code == 1 and not served
    assert result.output == f"error: cannot listen on 127.0.0.1 port {port}: Address already in use\n"
