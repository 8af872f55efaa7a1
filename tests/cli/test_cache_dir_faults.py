"""A --cache-dir that is a file, unreadable or read-only: `ls`, `extract` and `train-head` say so in one
line naming it, and exit 1 (`ls` of a file once said "no entries" and exited 0; `extract` printed a bare
"File exists"). `ls` only reads: a read-only root lists as any other."""

from __future__ import annotations

import os

import pytest
from cli_output import one_error_line
from click.testing import CliRunner

from layerfuse.cli import roots
from layerfuse.cli.main import main as cli

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0  # permissions do not stop root


def _commands(root, tiny_bert_dir, tiny_conll_dir) -> dict[str, list[str]]:
    return {"ls": ["ls", "--cache-dir", str(root)],
            "extract": ["extract", "--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir),
                        "--cache-dir", str(root), "--quiet"],
            # explicit: auto's measurement is remembered in the root, which os.access cannot keep root from writing
            "train-head": ["train-head", "--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir),
                           "--cache-dir", str(root), "--quiet", "--precision", "fp32"]}


@pytest.mark.parametrize("command", ["ls", "extract", "train-head"])
def test_a_file_as_cache_dir(tmp_path, tiny_bert_dir, tiny_conll_dir, command):
    root = tmp_path / "notes.txt"
    root.write_text("not a cache")
    line = one_error_line(CliRunner().invoke(cli, _commands(root, tiny_bert_dir, tiny_conll_dir)[command]))
    assert f"--cache-dir {root} is not a directory" in line
    assert root.read_text() == "not a cache"


def test_below_a_file(tmp_path, tiny_bert_dir, tiny_conll_dir):
    (tmp_path / "f").write_text("")
    root = tmp_path / "f" / "cache"
    line = one_error_line(CliRunner().invoke(cli, _commands(root, tiny_bert_dir, tiny_conll_dir)["extract"]))
    assert f"--cache-dir {root} is not a directory ({tmp_path / 'f'} is one)" in line


def _deny(monkeypatch, path, mode):
    """os.access as an unprivileged user sees ``path`` with ``mode`` bits refused (tests may run as root)."""
    real = os.access
    monkeypatch.setattr(roots.os, "access",
                        lambda p, m: False if os.path.abspath(p) == str(path) and m & mode else real(p, m))


@pytest.mark.parametrize("command", ["ls", "extract", "train-head"])
def test_an_unreadable_cache_dir(tmp_path, tiny_bert_dir, tiny_conll_dir, command, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    _deny(monkeypatch, root, os.R_OK)
    line = one_error_line(CliRunner().invoke(cli, _commands(root, tiny_bert_dir, tiny_conll_dir)[command]))
    assert f"--cache-dir {root} is not readable" in line


@pytest.mark.parametrize("command", ["extract", "train-head"])
def test_a_read_only_cache_dir(tmp_path, tiny_bert_dir, tiny_conll_dir, command, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    _deny(monkeypatch, root, os.W_OK)
    line = one_error_line(CliRunner().invoke(cli, _commands(root, tiny_bert_dir, tiny_conll_dir)[command]))
    assert f"--cache-dir {root} is read-only; extract writes " in line  # the entry to extract: none is there
    assert os.listdir(root) == []
    listed = CliRunner().invoke(cli, _commands(root, tiny_bert_dir, tiny_conll_dir)["ls"])
    assert listed.exit_code == 0 and "no entries" in listed.output  # reading needs no write


def _run(tmp_path, command: str, root, tiny_bert_dir, tiny_conll_dir) -> list[str]:
    source = ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir), "--cache-dir", str(root), "--quiet"]
    head = ["--fusion", "concat", "--shots", "2", "--epochs", "1", "--precision", "fp32"]
    return {"extract": ["extract", *source],
            "train-head": ["train-head", *source, *head, "--out", str(tmp_path / "runs")],
            "sweep": ["sweep", *source, "--fusions", "concat", "--shots", "2", "--epochs", "1", "--precision", "fp32",
                      "--out", str(tmp_path / "sweep")]}[command]


@pytest.mark.parametrize("command", ["extract", "train-head", "sweep"])
def test_a_read_only_root_serves_an_entry_that_is_there(tiny_cache, tmp_path, tiny_bert_dir, tiny_conll_dir,
                                                        command, monkeypatch):
    """A read-only root was refused up front, before the entry was looked for: `extract` of a complete entry,
    `train-head` and `sweep` on one that is there wrote nothing, and ended in "is read-only" all the same."""
    import shutil

    root = tmp_path / "root"
    shutil.copytree(tiny_cache, root / os.path.basename(tiny_cache))
    before = sorted(os.listdir(root))
    _deny(monkeypatch, root, os.W_OK)
    result = CliRunner().invoke(cli, _run(tmp_path, command, root, tiny_bert_dir, tiny_conll_dir))
    assert result.exit_code == 0, result.output
    # the record of a read is tried, and passed over where it cannot be written (`usage.mark_read`)
    assert sorted(n for n in os.listdir(root) if not n.endswith(".read")) == before


def test_serve_on_a_read_only_root_says_what_it_writes_there(tmp_path, monkeypatch):
    """serve refused a read-only root with "this command writes there", though serving entries is reading:
    what it writes (its job queue, its token) was not said."""
    root = tmp_path / "root"
    root.mkdir()
    _deny(monkeypatch, root, os.W_OK)
    line = one_error_line(CliRunner().invoke(cli, ["serve", "--cache-dir", str(root)]))
    assert f"--cache-dir {root} is read-only; serve keeps its job queue and its lock there" in line


@pytest.mark.skipif(AS_ROOT, reason="permission bits do not stop root")
def test_real_permissions(tmp_path, tiny_bert_dir, tiny_conll_dir):
    root = tmp_path / "root"
    root.mkdir()
    root.chmod(0o500)
    try:
        extract = CliRunner().invoke(cli, _commands(root, tiny_bert_dir, tiny_conll_dir)["extract"])
        assert "is read-only" in one_error_line(extract)
        root.chmod(0o000)
        assert "is not readable" in one_error_line(CliRunner().invoke(cli, ["ls", "--cache-dir", str(root)]))
    finally:
        root.chmod(0o700)


def test_train_head_never_picks_a_damaged_entry(tmp_path, tiny_cache):
    """`train-head --cache-dir` once took the newest complete entry, a damaged one, and stopped instead
    of using the intact one. No entry is chosen by age any more: beside an entry with a lost chunk it asks
    which (one line naming each), and an entry it cannot read is never a candidate."""
    import shutil

    root = tmp_path / "root"
    intact, lost, corrupt = root / "intact", root / "lost", tmp_path / "corrupt"
    shutil.copytree(tiny_cache, intact)
    shutil.copytree(tiny_cache, lost)
    os.remove(lost / "train" / "hidden" / "c" / "0" / "0" / "0")
    os.utime(lost / "zarr.json")  # the newest
    line = one_error_line(CliRunner().invoke(cli, ["train-head", "--cache-dir", str(root), "--dry-run"]))
    assert line.startswith("error: which entry?") and f"--cache {intact}" in line and f"--cache {lost}" in line
    shutil.rmtree(lost)
    shutil.copytree(tiny_cache, corrupt)
    meta = bytearray((corrupt / "zarr.json").read_bytes())
    meta[20] = 0xFF
    (corrupt / "zarr.json").write_bytes(bytes(meta))
    shutil.move(corrupt, root / "corrupt")
    out = CliRunner().invoke(cli, ["train-head", "--cache-dir", str(root), "--dry-run"])
    assert out.exit_code == 0 and f"({intact})" in out.output


def test_an_empty_listing_says_what_may_explain_it(tmp_path):
    from layerfuse.cli.cache import _why_empty

    missing = CliRunner().invoke(cli, ["ls", "--cache-dir", str(tmp_path / "nowhere")])
    assert missing.exit_code == 0 and missing.output == f"no entries under {tmp_path / 'nowhere'} (no such folder)\n"
    assert _why_empty("http://127.0.0.1:8000") == " (a layerfuse server serves its root at http://127.0.0.1:8000/entries)"
    assert _why_empty("http://127.0.0.1:8000/entries/") == "" and _why_empty(str(tmp_path)) == ""
