"""One command line: every command is `layerfuse <verb>` under the console scripts' names, the
group's old names still work without being listed, and no other bare script (a generic name such as
`predict` on a user's PATH) is installed."""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from layerfuse.cli.main import COMMANDS, HIDDEN_ALIASES, main

VERBS = ["extract", "train-head", "sweep", "rank-layers", "probe", "predict", "export", "ls", "info", "rm", "verify",
         "gc", "serve"]
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _listed_commands(help_text: str) -> list[str]:
    section = help_text.split("Commands:", 1)[1]
    return [m.group(1) for m in re.finditer(r"^  (\S+)", section, re.MULTILINE)]


def test_help_lists_every_verb_and_no_old_name():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    assert sorted(_listed_commands(result.output)) == sorted(VERBS) == sorted(COMMANDS)
    assert not set(HIDDEN_ALIASES) & set(_listed_commands(result.output))


@pytest.mark.parametrize("old, new", [("train", "train-head"), ("rank", "rank-layers")])
def test_old_group_names_still_work(old, new):
    result = CliRunner().invoke(main, [old, "--help"], prog_name="layerfuse")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: layerfuse {new} ")  # usage names the current verb
    assert main.get_command(None, old) is main.get_command(None, new)


def test_console_scripts():
    scripts = tomllib.loads(PYPROJECT.read_text())["project"]["scripts"]
    assert scripts == {
        "layerfuse": "layerfuse.cli.launch:layerfuse",
        "extract": "layerfuse.cli.launch:extract",
        "train-head": "layerfuse.cli.launch:train_head",
    }


@pytest.mark.parametrize("verb", ["extract", "train-head", "sweep", "rank-layers", "verify"])
def test_quiet_wherever_a_progress_bar_is_drawn(verb):
    result = CliRunner().invoke(main, [verb, "--help"])
    assert result.exit_code == 0 and "--quiet" in result.output


@pytest.mark.parametrize("script, usage", [("layerfuse", "[OPTIONS] COMMAND [ARGS]...\n\n  Cache every layer"),
                                           ("extract", "[OPTIONS]\n\n  Run a frozen encoder"),
                                           ("train_head", "[OPTIONS]\n\n  Train a fusion head")])
def test_each_console_script_runs_its_command(script, usage, monkeypatch, capsys):
    from layerfuse.cli import launch

    monkeypatch.setattr(sys, "argv", [script.replace("_", "-"), "--help"])
    with pytest.raises(SystemExit) as exit_:
        getattr(launch, script)()
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out.startswith("Usage: ") and usage in out, out


def test_ctrl_c_while_a_command_loads_is_one_line(tmp_path):
    """The console scripts imported every command, and torch, before any handler of ours ran: Ctrl-C
    in those seconds was a traceback. A real SIGINT, sent while the command is still importing."""
    import os
    import signal
    import subprocess
    import time

    from layerfuse.cli.launch import LOADING

    code = "import sys; from layerfuse.cli.launch import layerfuse; print('ready', flush=True); layerfuse()"
    child = subprocess.Popen([sys.executable, "-c", code, "extract", "--help"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE,
                             text=True, start_new_session=True, env={**os.environ, "PYTHONPATH": os.getcwd()},
                             # SIGINT as a terminal gives it, even where this run inherited it ignored
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert child.stdout.readline().strip() == "ready"  # in `command`, importing the commands and torch
    time.sleep(0.2)
    os.killpg(child.pid, signal.SIGINT)
    out, err = child.communicate(timeout=60)
    if out.startswith("Usage"):  # it loaded within the 0.2 s (torch already in the page cache): nothing to test
        pytest.skip("the commands loaded before the signal")
    assert child.returncode == 130 and err.strip() == LOADING, err


def test_sigterm_ends_a_command_as_ctrl_c_does(tiny_cache, tmp_path):
    """A scheduler's time limit (SIGTERM) killed a command mid-step in silence, its cleanup never run: it
    now says what was kept, as Ctrl-C does, and exits 143."""
    import os
    import signal
    import subprocess

    code = "import sys; from layerfuse.cli.launch import train_head; sys.argv[0] = 'train-head'; train_head()"
    args = ["--cache", tiny_cache, "--fusion", "base", "--shots", "all", "--epochs", "100000", "--eval-points", "1",
            "--out", str(tmp_path / "runs")]
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    seen = ""
    while "precision" not in seen:  # train-head names its precision before it trains
        line = child.stderr.readline()
        assert line, f"train-head ended before training: {seen}"
        seen += line
    os.kill(child.pid, signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 143, err
    assert err.strip().splitlines()[-1].startswith("interrupted; no head was saved"), err
    assert not list((tmp_path / "runs").glob("*.head.safetensors"))


@pytest.mark.slow
def test_sigterm_to_a_sweep_ends_its_workers_too(tiny_cache, tmp_path):
    """A SIGTERM to the sweep alone (not its process group, as Ctrl-C reaches them) left its workers finishing
    their runs, unrecorded, while the pool's shutdown waited on them."""
    import os
    import signal
    import subprocess
    import time

    code = "import sys; from layerfuse.cli.launch import layerfuse; sys.argv[0] = 'layerfuse'; layerfuse()"
    args = ["sweep", "--cache", tiny_cache, "--fusions", "base", "--shots", "all", "--epochs", "100000", "--trials",
            "2", "--workers", "2", "--pack", "1", "--quiet", "--out", str(tmp_path / "sweep")]
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    seen = ""
    while "precision" not in seen:
        line = child.stderr.readline()
        assert line, f"the sweep ended before its runs: {seen}"
        seen += line
    time.sleep(8)  # the workers start (spawned: each imports torch) and train
    os.kill(child.pid, signal.SIGTERM)
    started = time.monotonic()
    _, err = child.communicate(timeout=120)
    assert child.returncode == 143 and time.monotonic() - started < 30, err


@pytest.mark.slow
@pytest.mark.parametrize("after", [0, 8])  # seconds: at once (the pool missed it), or mid-run (the pool saw it)
def test_a_sweep_whose_worker_is_killed_says_so_in_one_line(tiny_cache, tmp_path, after):
    """A worker killed mid-run (the out-of-memory killer) ended the sweep in a BrokenProcessPool traceback, or,
    killed right after it was spawned, left the sweep waiting for ever (the pool never saw it die)."""
    import os
    import signal
    import subprocess
    import time

    code = "import sys; from layerfuse.cli.launch import layerfuse; sys.argv[0] = 'layerfuse'; layerfuse()"
    args = ["sweep", "--cache", tiny_cache, "--fusions", "base", "--shots", "all", "--epochs", "100000", "--trials",
            "2", "--workers", "2", "--pack", "1", "--quiet", "--out", str(tmp_path / "sweep")]
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        workers: list[int] = []
        for _ in range(1200):  # the pool's processes, the second spawned once the first run is submitted
            time.sleep(0.1)
            pids = map(int, filter(str.isdigit, os.listdir("/proc")))
            workers = [pid for pid in pids if _is_worker_of(pid, child.pid)]
            if len(workers) >= 2:
                break
        assert len(workers) == 2, "the sweep started no second worker"
        time.sleep(after)
        os.kill(max(workers), signal.SIGKILL)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 1, err
    assert err.strip().splitlines()[-1].startswith("error: a worker process died mid-run ("), err
    assert err.strip().endswith("rerun the same command to go on"), err
    assert "Traceback" not in err, err


def _is_worker_of(pid: int, parent: int) -> bool:
    """Whether ``pid`` is a pool worker ``parent`` spawned (not its resource tracker)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return ppid == parent and b"spawn_main" in f.read()
    except (OSError, ValueError, IndexError):
        return False


def test_help_and_version_load_no_command():
    """`layerfuse --help` and `--version` list and name the commands without importing them (most import
    torch: 1.5 s before the first line); each command is loaded when it runs."""
    code = ("import sys; from click.testing import CliRunner; from layerfuse.cli.main import main; "
            "assert CliRunner().invoke(main, ['--help']).exit_code == 0; "
            "assert CliRunner().invoke(main, ['--version']).exit_code == 0; "
            "print(sorted(m for m in ('torch', 'layerfuse.cli.train', 'layerfuse.cli.cache') if m in sys.modules))")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_cache_commands_read_an_entry_without_torch(tiny_cache):
    """`ls`, `info` and `verify` read numpy only: they answer without torch's import (seconds)."""
    root = str(Path(tiny_cache).parent)
    code = ("import sys; from click.testing import CliRunner; from layerfuse.cli.main import main; "
            f"runs = [['ls', '--cache-dir', {root!r}], ['info', {tiny_cache!r}], ['verify', {tiny_cache!r}]]; "
            "codes = [CliRunner().invoke(main, args).exit_code for args in runs]; "
            "print(codes, 'torch' in sys.modules)")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[0, 0, 0] False", out.stdout + out.stderr


def test_every_listed_command_loads_and_runs_its_help():
    for name in COMMANDS:
        result = CliRunner().invoke(main, [name, "--help"], prog_name="layerfuse")
        assert result.exit_code == 0 and result.output.startswith(f"Usage: layerfuse {name} "), result.output


def test_ctrl_c_while_a_rerun_saves_leaves_its_files_in_agreement(tiny_cache, tmp_path):
    """A rerun of a run whose weights come out other (another thread count, device or precision) was cut by
    Ctrl-C right after its weights were written: the earlier description and record no longer matched them,
    and predict refused the head ("sha256 differs") while train-head said no head was saved."""
    import os
    import subprocess

    from layerfuse.training.checkpoint import file_sha256, load_checkpoint

    args = ["--cache", tiny_cache, "--fusion", "base", "--shots", "2", "--epochs", "1", "--out", str(tmp_path)]
    first = CliRunner().invoke(main, ["train-head", *args])
    assert first.exit_code == 0, first.output
    code = ("import os, signal, sys, torch, safetensors.torch as st\n"
            "save = st.save_model\n"
            "def other_weights_then_ctrl_c(module, path, **kw):\n"
            "    with torch.no_grad():\n"
            "        next(module.parameters()).add_(1.0)  # a rerun whose weights differ\n"
            "    save(module, path, **kw)\n"
            "    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C as soon as they are written\n"
            "st.save_model = other_weights_then_ctrl_c\n"
            "from layerfuse.cli.launch import train_head; sys.argv[0] = 'train-head'; train_head()")
    child = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert child.returncode == 130, child.stderr
    assert child.stderr.strip().splitlines()[-1].startswith("interrupted after the head was saved: ")  # not "no head"
    [record] = [p for p in tmp_path.glob("base-*.json") if not p.name.endswith(".head.json")]
    weights = tmp_path / json.loads(record.read_text())["checkpoint"]
    assert json.loads(record.read_text())["head_sha256"] == file_sha256(str(weights))  # the new pair, whole
    load_checkpoint(str(weights))  # its description's checksum is the weights' too


@pytest.mark.parametrize("verb, said", [("train-head", ["best dev score: span F1, or accuracy for",
                                                          "word classes for a token set"]),
                                        ("rank-layers", ["word classes for a token set"]),
                                        ("sweep", ["plot of dev score against step (f1_vs_step.png)"])])
def test_help_says_the_metric_and_c_of_a_token_set_too(verb, said):
    """A POS head's score is an accuracy and its C its word classes: help said "best dev F1", "C = entity types"."""
    result = CliRunner().invoke(main, [verb, "--help"])
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and all(s in text for s in said), text
    assert "best dev F1" not in text and "C = entity types" not in text and "F1-vs-step" not in text
