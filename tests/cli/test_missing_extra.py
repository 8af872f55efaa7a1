"""A command whose optional packages are missing says which `pip install` brings them, in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

# The module blocked as if it were not installed (None in sys.modules makes its import fail), then the command.
SCRIPT = """
import sys
sys.modules[sys.argv[1]] = None
from layerfuse.cli.main import main
sys.argv = ["layerfuse", "serve", "--cache-dir", sys.argv[2], "--port", "0"]
main()
"""


@pytest.mark.parametrize("missing", ["uvicorn", "starlette"])
def test_serve_without_the_extra_is_one_line(missing, tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, missing, str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"error: serve needs the package '{missing}', part of the serve extra: pip install \"layerfuse[serve]\""]


SWEEP = """
import sys
sys.modules["ray"] = None
from layerfuse.cli.main import main
sys.argv = ["layerfuse", "sweep", "--cache", sys.argv[1], "--fusions", "concat", "--shots", "2", "--epochs", "1",
            "--trials", "1", "--ray", "local", "--quiet", "--out", sys.argv[2]]
main()
"""


def test_sweep_on_ray_without_the_extra_is_one_line(tiny_cache, tmp_path):
    out = subprocess.run([sys.executable, "-c", SWEEP, tiny_cache, str(tmp_path / "sw")], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "error: sweeps on Ray need the package 'ray', part of the ray extra: pip install \"layerfuse[ray]\"")
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("argv", [["extract", "--help"], ["layerfuse", "train-head", "--help"]])
def test_a_system_without_posix_file_locks_is_told_in_one_line(argv):
    """pip installs layerfuse on Windows, where every command but `ls` ended in a `import fcntl` traceback."""
    script = ("import sys; sys.modules['fcntl'] = None; sys.argv = {!r}\n"
              "from layerfuse.cli import launch; getattr(launch, {!r})()").format(argv, argv[0].replace("-", "_"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: layerfuse needs a POSIX system (Linux or macOS): this Python has no fcntl module, which its file "
        "locks use (on Windows, run it under WSL)"]
