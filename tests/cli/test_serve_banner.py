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
