"""A ``~`` the shell did not expand (``--cache-dir=~/x``, ``LAYERFUSE_HOME=~/x`` in an env file) is the
home folder: it made a folder named ``~`` in the working directory, while the free-space check measured
the home folder."""

from __future__ import annotations

import os

from layerfuse.cache import layout
from layerfuse.cache.layout import cache_root
from layerfuse.cli.roots import checked_out


def test_a_quoted_tilde_in_the_cache_root_is_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LAYERFUSE_HOME", "~/lf")
    assert cache_root() == str(tmp_path / "lf")
    assert cache_root("~/other") == str(tmp_path / "other")
    assert cache_root("s3://bucket/root") == "s3://bucket/root"  # a remote root is left as written


def test_a_quoted_tilde_in_out_is_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert checked_out("~/runs") == str(tmp_path / "runs")
    assert not os.path.exists(tmp_path / "~")


def test_no_home_folder_to_read_a_tilde_as_is_one_line_not_a_folder_named_tilde(monkeypatch, tmp_path):
    """A batch job's user id with no password entry and HOME unset: ~ stayed as written, and the default cache
    root became ./~/.cache/layerfuse in the working folder (242 MiB there; `rm -rf ~` to clean it up)."""
    import pwd

    import pytest
    from click.testing import CliRunner

    from layerfuse.cli.main import main
    from layerfuse.errors import LayerfuseError

    def no_entry(uid):
        raise KeyError(uid)

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("LAYERFUSE_HOME", raising=False)
    monkeypatch.delenv(layout.RENAMED_HOME_ENV, raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LayerfuseError, match=r"no home folder to read ~ as \(HOME is unset"):
        cache_root()
    assert cache_root(str(tmp_path / "root")) == str(tmp_path / "root")  # named in full: no home needed
    listed = CliRunner().invoke(main, ["ls"])
    assert listed.exit_code == 1 and "set HOME, or name the folder in full" in listed.output
    quoted = CliRunner().invoke(main, ["ls", "--cache-dir=~/root"])
    assert quoted.exit_code == 2 and "no home folder to read ~ as" in quoted.output
    assert not os.path.exists(tmp_path / "~")


def test_a_name_that_only_starts_with_a_tilde_is_kept_as_written(monkeypatch, tmp_path):
    """`~notes.txt` (no user of that name) is a file's name: refused as "no home folder" once ~ meant home."""
    from layerfuse.cache.layout import home_path

    monkeypatch.setenv("HOME", str(tmp_path))
    assert home_path("~notes.txt") == "~notes.txt" and home_path("a/~b") == "a/~b"
    assert home_path("~/x") == str(tmp_path / "x")


def test_auto_precision_with_no_home_folder_measures_and_goes_on(monkeypatch, capsys):
    """A batch job with full paths but no home folder: --precision auto (the default) needs the default root
    only to remember its measurement, and ended the run naming a ~ the user never typed."""
    import pwd

    import torch

    from layerfuse import precision

    def no_entry(uid):
        raise KeyError(uid)

    for name in ("HOME", "LAYERFUSE_HOME", layout.RENAMED_HOME_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.setattr(precision, "time_products", lambda device: (2e-3, 1e-3))
    assert precision.auto_precision(torch.device("cpu")) == "bf16"
    assert "measured bf16 here, not remembered" in capsys.readouterr().err
