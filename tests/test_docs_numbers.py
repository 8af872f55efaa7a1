"""The README holds no measured figure that is not also in a results file: every number in its prose
with a decimal point or a thousands separator (45.1, 0.93, 1,916) must appear, as a whole number,
in some file under docs/results/ (written by the script that measured it). Code blocks, inline code
and link targets are left out: commands and versions are not measurements."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"

# A number with a decimal point (0.93, 45.1) or thousands separators (1,916 or 203,621.5), not part
# of a longer run of digits, dots or commas (so "8,16,32" and "1.2.3" are not read as numbers).
NUMBER = re.compile(r"(?<![\w.,])(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+)(?![\w]|[.,]\d)")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK_TARGET = re.compile(r"\]\([^)]*\)")


def prose(markdown: str) -> str:
    """The text a reader takes figures from: no fenced blocks, inline code or link targets."""
    for pattern in (FENCE, INLINE_CODE, LINK_TARGET):
        markdown = pattern.sub(" ", markdown)
    return markdown


def numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


def results_numbers(folder: Path) -> set[str]:
    """Every number, written the same way, in any text file under ``folder``."""
    found: set[str] = set()
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix in {".md", ".json", ".jsonl", ".txt", ".csv"}:
            found.update(NUMBER.findall(path.read_text(encoding="utf-8", errors="replace")))
    return found


def missing(markdown: str, known: set[str]) -> list[str]:
    return sorted({n for n in numbers(prose(markdown)) if n not in known})


def test_every_readme_figure_is_in_a_results_file():
    assert RESULTS.is_dir(), "docs/results/ is missing"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    absent = missing(readme, results_numbers(RESULTS))
    assert not absent, f"README.md has numbers no file under docs/results/ holds: {', '.join(absent)}"


def test_the_check_finds_a_figure_that_no_results_file_holds(tmp_path):
    (tmp_path / "table.md").write_text("| concat | 43.6 ± 3.7 | 1,056,585 |\n", encoding="utf-8")
    known = results_numbers(tmp_path)
    text = ("Concat reaches 43.6 with 1,056,585 parameters, DWAtt 42.7.\n\n"
            "```bash\npip install torch==2.13.0\n```\n"
            "Inline `--lr 0.001` and a [link](https://doi.org/10.18653/v1/x) are not figures; "
            "nor are 8,16,32 or 1.2.3. But 143.6 is not 43.6, and 1,056,5850 is no number.\n")
    assert missing(text, known) == ["143.6", "42.7"]


def test_the_cli_reference_documents_every_command():
    """docs/reference/cli.md has one generated block per command of the `layercache` group."""
    from layercache.cli.main import main

    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    documented = set(re.findall(r":prog_name: layercache ([\w-]+)", page))
    assert documented == set(main.commands), f"documented {sorted(documented)}, commands {sorted(main.commands)}"
