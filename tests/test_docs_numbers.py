"""The README and the paper page hold no measured figure that is not also in a results file: every
number in their prose with a decimal point or a thousands separator (45.1, 0.93, 1,916) must appear,
as a whole number, in some file under docs/results/ (written by the script that measured it) for the
README, and for docs/paper.md in a results file that the page itself includes (``--8<--``) or links
(``](results/...)``), so that a reader can find every number where the page sends them. Code
blocks, inline code and link targets are left out: commands and versions are not measurements. On
the paper page, the paper's own numbers are quoted only in the paragraphs that begin
``**The paper``, and only those paragraphs are exempt."""

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


PAPER = ROOT / "docs" / "paper.md"
INCLUDE = re.compile(r'^\s*--8<--\s+"([^"]+)"\s*$', re.M)
RESULTS_LINK = re.compile(r"\]\((results/[^)#\s]+)")
TEXT = {".md", ".json", ".jsonl", ".txt", ".csv"}
QUOTE = "**The paper"  # a paragraph quoting the paper (its figure, table or section named there)
REFERENCE = re.compile(r"§\s?\d+(?:\.\d+)*|arXiv:\s?\d+\.\d+")  # the paper's section numbers and its arXiv id


def sources(page: str, *, docs: Path) -> list[Path]:
    """The results files a page includes (snippets, from docs/results/) or links (relative to docs/)."""
    found = [docs / "results" / name for name in INCLUDE.findall(page)]
    found += [docs / target for target in RESULTS_LINK.findall(page)]
    return sorted({p for p in found if p.suffix in TEXT})


def file_numbers(paths) -> set[str]:
    return {n for p in paths for n in NUMBER.findall(p.read_text(encoding="utf-8", errors="replace"))}


def own_prose(page: str) -> str:
    """The page's prose without its includes, the paragraphs that quote the paper, and references to
    the paper's sections and arXiv id (numbers that name, not measure)."""
    text = REFERENCE.sub(" ", prose(INCLUDE.sub(" ", page)))
    return "\n\n".join(p for p in re.split(r"\n\s*\n", text) if not p.lstrip().startswith(QUOTE))


def test_every_paper_page_figure_is_in_a_file_it_includes_or_links():
    page = PAPER.read_text(encoding="utf-8")
    files = sources(page, docs=ROOT / "docs")
    absent = [str(p.relative_to(ROOT)) for p in files if not p.is_file()]
    assert not absent, f"docs/paper.md includes or links missing files: {absent}"
    assert len(files) >= 5, files  # the tables it includes, at least
    gaps = missing(own_prose(page), file_numbers(files))
    assert not gaps, ("docs/paper.md has numbers that no results file it includes or links holds: "
                      f"{', '.join(gaps)} (files: {', '.join(p.name for p in files)})")


def test_the_paper_page_check_reads_only_its_own_files(tmp_path):
    docs = tmp_path / "docs"
    (docs / "results").mkdir(parents=True)
    (docs / "results" / "grid.md").write_text("| concat | 43.6 ± 3.7 |\n", encoding="utf-8")
    (docs / "results" / "other.md").write_text("| dwatt | 42.7 |\n", encoding="utf-8")
    (docs / "results" / "linked.md").write_text("51.3 and 1,056,585\n", encoding="utf-8")
    page = ('--8<-- "grid.md"\n\nSee [this](results/linked.md) and ![a plot](results/plot.png).\n\n'
            "**The paper (Table 3).** Concat 3.44 against Base 2.90.\n\n"
            "Concat reaches 43.6 and 51.3 with 1,056,585 parameters; DWAtt 42.7; the paper's 2.90 "
            "(arXiv:2209.15168, §9.1).\n")
    files = sources(page, docs=docs)
    assert [p.name for p in files] == ["grid.md", "linked.md"]  # not other.md, not the PNG
    # 42.7 is in a results file the page neither includes nor links; 2.90 outside a quote of the paper
    assert missing(own_prose(page), file_numbers(files)) == ["2.90", "42.7"]


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
    """docs/reference/cli.md has one generated block per command of the `layerfuse` group."""
    from layerfuse.cli.main import main

    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    documented = set(re.findall(r":prog_name: layerfuse ([\w-]+)", page))
    commands = set(main.list_commands(None))  # loaded when they run: the group lists them
    assert documented == commands, f"documented {sorted(documented)}, commands {sorted(commands)}"
