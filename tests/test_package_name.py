"""The package's one name: `layerfuse` from install to import. Its former name is taken on PyPI by an
unrelated project, so it appears only where what the former name wrote is still read: the old
cache-root variable (with a notice) and heads saved under the former format name, and in the files
an earlier release wrote (the test fixtures, the results files)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from layerfuse.cache.layout import cache_root

REPO = Path(__file__).resolve().parents[1]
OLD = "layer" + "cache"  # spelt in two so that this file does not name it
TEXT = (".py", ".md", ".toml", ".yml", ".yaml", ".cff", ".txt", ".sh", ".cfg", ".json", ".html", ".css", ".js")
NOTICE = REPO / "layerfuse" / "cache" / "layout.py"  # the variable's notice
READERS = {NOTICE, REPO / "layerfuse" / "training" / "checkpoint.py"}  # and the heads' former format name


SKIP = {".git", ".venv", "venv", "site", "build", "dist", "runs", "models", "node_modules", "__pycache__"}


def test_the_former_name_appears_only_in_the_notice():
    found = []
    for folder, dirs, files in os.walk(REPO):
        rel = Path(folder).relative_to(REPO)
        dirs[:] = [d for d in dirs if d not in SKIP and (d == ".ci" or not d.startswith("."))
                   and not d.endswith(".egg-info")
                   and (rel / d).parts not in (("docs", "results"), ("tests", "data"))]  # as releases wrote them
        for name in files:
            path = Path(folder) / name
            if path.suffix in TEXT and path not in READERS and OLD in path.read_text(encoding="utf-8",
                                                                               errors="replace").lower():
                found.append(str(path.relative_to(REPO)))
    assert not found, f"the former name in {found}"


def test_the_former_variable_is_still_read_and_said_so(monkeypatch, tmp_path, capsys):
    from layerfuse.cache import layout

    monkeypatch.setattr(layout, "_SAID", [])
    monkeypatch.delenv("LAYERFUSE_HOME", raising=False)
    monkeypatch.setenv(OLD.upper() + "_HOME", str(tmp_path))
    assert cache_root() == cache_root() == str(tmp_path)
    assert capsys.readouterr().err.count("LAYERFUSE_HOME (") == 1  # once a process (a command printed it twice)
    monkeypatch.setenv("LAYERFUSE_HOME", str(tmp_path / "new"))
    assert cache_root() == str(tmp_path / "new")


def test_the_former_default_root_is_used_while_the_new_one_is_absent(monkeypatch, tmp_path, capsys):
    """Entries under the former name's default root (~/.cache/<former name>) were passed by in silence and
    extracted again."""
    from layerfuse.cache import layout

    monkeypatch.setattr(layout, "_SAID", [])
    for name in ("LAYERFUSE_HOME", OLD.upper() + "_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_root() == str(tmp_path / ".cache" / "layerfuse")  # neither there: the new default
    (tmp_path / ".cache" / OLD).mkdir(parents=True)
    assert cache_root() == cache_root() == str(tmp_path / ".cache" / OLD)
    assert capsys.readouterr().err.count(f"note: using the cache root {tmp_path / '.cache' / OLD}") == 1
    (tmp_path / ".cache" / "layerfuse").mkdir()
    assert cache_root() == str(tmp_path / ".cache" / "layerfuse")


def test_one_version_in_the_three_places_that_state_it():
    """pyproject.toml (what pip installs and `--version` prints), ``layerfuse.__version__``,
    CITATION.cff and the BibTeX entries of the README and the docs say the same release."""
    import re

    import layerfuse

    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    cited = re.search(r"^version: *(\S+)$", (REPO / "CITATION.cff").read_text(encoding="utf-8"), re.M).group(1)
    assert layerfuse.__version__ == declared == cited.strip("\"'")
    for page in ("README.md", "docs/index.md"):  # the BibTeX entry of "Citing"
        text = (REPO / page).read_text(encoding="utf-8")
        assert re.search(r'@software\{layerfuse,.*?version = "(.+?)"', text, re.S).group(1) == declared, page


def test_the_source_distribution_holds_the_package_and_no_part_of_the_tests(tmp_path):
    """setuptools ships ``tests/test*.py`` by default: a part of the suite without conftest.py or the
    docs it reads, which fails to collect. MANIFEST.in leaves the tests to the repository."""
    import subprocess
    import sys
    import tarfile

    build = "import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))"
    name = subprocess.run([sys.executable, "-c", build, str(tmp_path)], cwd=REPO, check=True, capture_output=True,
                          text=True).stdout.split()[-1]
    with tarfile.open(tmp_path / name) as sdist:
        members = [m.split("/", 1)[1] for m in sdist.getnames() if "/" in m]
    assert not [m for m in members if m.startswith("tests")]
    assert {"README.md", "LICENSE", "CITATION.cff", "pyproject.toml", "layerfuse/cli/main.py"} <= set(members)


def test_the_package_says_it_is_typed():
    """PEP 561: without `py.typed` in the wheel a user's mypy saw no hint of the package."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["layerfuse"]
    assert (REPO / "layerfuse" / "py.typed").is_file()
