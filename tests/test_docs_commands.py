"""Every command the paper page, the layer-selection guide and the paper page's table of figure costs
quote can be typed as written: the script or `layerfuse` command exists, and its --help names every
flag the quoted command passes (a renamed or dropped option would otherwise leave the page quoting a
command that fails). And every results file and figure the paper page shows has its row, with its
command, in that table (docs/results/figure_costs.md, written by scripts/figure_costs.py)."""

from __future__ import annotations

import contextlib
import functools
import io
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COSTS = ROOT / "docs" / "results" / "figure_costs.md"
PAGES = [ROOT / "docs" / "paper.md", ROOT / "docs" / "guide" / "layers.md", COSTS]
FENCE = re.compile(r"^```(?:bash|sh|console)?\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`((?:python scripts/|layerfuse )[^`]+)`")
FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")


def commands(page: str) -> list[str]:
    """The `python scripts/...` and `layerfuse ...` commands of a page: fenced shell blocks (lines
    joined at a trailing backslash, comments dropped) and inline code spans."""
    found = []
    for block in FENCE.findall(page):
        for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith(("python scripts/", "layerfuse ")):
                found.append(line)
    found += [c.strip() for c in INLINE.findall(page)]
    return found


@functools.cache
def help_text(program: tuple[str, ...]) -> str:
    """The --help of a script (run as the page says) or of a `layerfuse` command."""
    if program[0] == "layerfuse":
        from click.testing import CliRunner

        from layerfuse.cli.main import main

        result = CliRunner().invoke(main, [*program[1:], "--help"])
        assert result.exit_code == 0, result.output
        return result.output
    # In this process, as `python SCRIPT --help` runs it (the script's folder first on the path): the
    # imports are paid once for every script, where a process per script paid them each time.
    out = io.StringIO()
    with contextlib.redirect_stdout(out), _argv([program[0], "--help"]), _path(str((ROOT / program[0]).parent)):
        try:
            runpy.run_path(str(ROOT / program[0]), run_name="__main__")
        except SystemExit as exc:
            assert exc.code in (0, None), f"{program[0]} --help exited {exc.code}"
    return out.getvalue()


@contextlib.contextmanager
def _argv(argv: list[str]):
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


@contextlib.contextmanager
def _path(folder: str):
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path.remove(folder)


def program_of(words: list[str]) -> tuple[str, ...]:
    if words[0] == "python":
        return (words[1],)
    subcommand = next((w for w in words[1:] if not w.startswith("-")), None)
    return ("layerfuse", subcommand) if subcommand else ("layerfuse",)


QUOTED = sorted({(page.relative_to(ROOT).as_posix(), c) for page in PAGES for c in commands(page.read_text("utf-8"))})


def test_the_pages_quote_commands():
    assert len(QUOTED) >= 10, QUOTED
    assert any("figure4_conll.py" in c for _, c in QUOTED)


@pytest.mark.parametrize("page,command", QUOTED, ids=[c[:60] for _, c in QUOTED])
def test_each_quoted_command_parses(page, command):
    words = shlex.split(command)
    program = program_of(words)
    if program[0] != "layerfuse":
        assert (ROOT / program[0]).is_file(), f"{page} quotes {program[0]}, which is not there"
    known = set(FLAG.findall(help_text(program)))
    passed = {w.split("=", 1)[0] for w in words if FLAG.fullmatch(w.split("=", 1)[0])}
    unknown = sorted(passed - known)
    assert not unknown, f"{page}: `{command}` passes {unknown}, which {' '.join(program)} --help does not name"


def test_every_figure_of_the_paper_page_has_its_command_machine_and_time():
    """Each results file the page includes and each figure it draws is named in a row of the cost
    table (the table itself aside); a new one needs its row in scripts/figure_costs.py, rerun."""
    page = (ROOT / "docs" / "paper.md").read_text("utf-8")
    shown = set(re.findall(r'^\s*--8<--\s+"([^"]+)"', page, re.M)) - {COSTS.name}
    shown |= {Path(p).name for p in re.findall(r"!\[[^\]]*\]\(results/([^)\s]+)\)", page)}
    rows = [line for line in COSTS.read_text("utf-8").splitlines() if line.startswith("| ") and "`" in line]
    missing = sorted(name for name in shown if not any(name in row for row in rows))
    assert not missing, (f"docs/paper.md shows {missing} with no row in {COSTS.name}: "
                         "add them to scripts/figure_costs.py")
    for row in rows:
        assert row.count(" | ") == 3 and all(cell.strip() for cell in row.strip("|").split(" | ")), row


def test_the_check_finds_a_flag_a_script_does_not_take(tmp_path):
    page = ("```bash\npython scripts/figure4_conll.py --records R \\\n    --no-such-flag 3  # a comment --x\n```\n"
            "and inline `python scripts/figure4_conll.py --shots 8`.\n")
    assert commands(page) == ["python scripts/figure4_conll.py --records R --no-such-flag 3",
                              "python scripts/figure4_conll.py --shots 8"]
    with pytest.raises(AssertionError, match="--no-such-flag"):
        test_each_quoted_command_parses("page", commands(page)[0])
