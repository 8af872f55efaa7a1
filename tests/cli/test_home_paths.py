"""Every path a command takes reads a leading ``~`` as the home folder. The shell leaves it as written
in ``--cache=~/entry`` or ``"~/runs"``: `info`, `predict --head/--file`, `export`, `train-head --cache`
and `extract --model` then found nothing, and an `--out` made a folder named ``~``."""

from __future__ import annotations

import importlib
import os
import shutil

from click.testing import CliRunner

from layerfuse.cli.light_options import UserPath
from layerfuse.cli.main import COMMANDS

# The options and arguments that name a file or folder of the user's (or a hub name, which never starts with ~).
PATH_PARAMS = {"cache", "cache_dir", "model", "checkpoint", "head", "files", "conll", "out", "token_file",
               "read_token_file", "runs", "data_dirs", "path"}


def _commands():
    for name, (module, attribute, _) in COMMANDS.items():
        yield name, getattr(importlib.import_module(f"layerfuse.cli.{module}"), attribute)


def test_every_path_option_of_every_command_expands_a_tilde():
    untyped = [f"{name} {p.name}" for name, command in _commands() for p in command.params
               if p.name in PATH_PARAMS and not isinstance(p.type, UserPath)]
    assert not untyped
    assert sum(p.name in PATH_PARAMS for _, command in _commands() for p in command.params) >= 25


def test_a_quoted_tilde_is_the_home_folder_where_it_names_an_entry_a_head_or_a_file(tiny_cache, tmp_path,
                                                                                   monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_cache, home / "entry")
    (home / "t.txt").write_text("Alice went to Paris\n", encoding="utf-8")
    from layerfuse.cli.cache import info_cmd
    from layerfuse.cli.predict import main as predict
    from layerfuse.cli.train import main as train

    runner = CliRunner()
    info = runner.invoke(info_cmd, ["~/entry"])
    assert info.exit_code == 0, info.output
    trained = runner.invoke(train, ["--cache=~/entry", "--shots", "2", "--epochs", "1", "--fusion", "concat",
                                    "--out=~/runs"])
    assert trained.exit_code == 0, trained.output
    (record,) = [f for f in os.listdir(home / "runs") if f.endswith(".json") and ".head." not in f]
    tagged = runner.invoke(predict, [f"--head=~/runs/{record}", "--file=~/t.txt"])
    assert tagged.exit_code == 0, tagged.output
    assert "Alice went to Paris" in tagged.output
    assert not os.path.exists(tmp_path / "~")
    assert isinstance(UserPath(readable=False).convert("~/x", None, None), str)
    assert UserPath(readable=False).convert("org/model", None, None) == "org/model"
