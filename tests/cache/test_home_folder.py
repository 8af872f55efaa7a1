"""A ``~`` the shell did not expand (``--cache-dir=~/x``, ``LAYERFUSE_HOME=~/x`` in an env file) is the
home folder: it made a folder named ``~`` in the working directory, while the free-space check measured
the home folder."""

from __future__ import annotations

import os

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
