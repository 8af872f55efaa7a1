"""Results files speak to a reader: no path of the machine that made them, no shell-quoting debris in the
command, a clear line when a script's CoNLL-2003 folder is not given; and included results files keep
the including page's contents list (docs_hooks/include_results.py)."""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_machine_paths_become_placeholders(load_script):
    common = load_script("_common")
    text = ("CoNLL-2003, .gpu/minilm-fp16: FE; runs in `/root/out/x.<dtype>.jsonl`; LAYERFUSE_HOME=/tmp/lc; "
            "see [the guide](../guide/training.md), docs/results/a.md, 1.5/2.0 and 3 km/h")
    assert common.public_path(text) == (
        "CoNLL-2003, PATH/minilm-fp16: FE; runs in `PATH/x.<dtype>.jsonl`; LAYERFUSE_HOME=PATH/lc; "
        "see [the guide](../guide/training.md), docs/results/a.md, 1.5/2.0 and 3 km/h")
    assert common.public_path(str(REPO / "docs" / "results" / "a.md")) == "docs/results/a.md"


def test_the_command_reads_as_typed(load_script):
    common = load_script("_common")
    argv = ["--data", "../shared/data/conll2003", "--model", ".gpu/minilm-fp16", "--note", "the machine's disk",
            "--table", "docs/results/x.md", "--out", "/root/out/x.jsonl", "--title", "a b"]
    line = common.command_line("x", argv)
    assert line == ('python scripts/x.py --data PATH/conll2003 --model PATH/minilm-fp16 '
                    '--note "the machine\'s disk" --table docs/results/x.md --out PATH/x.jsonl --title \'a b\'')
    assert shlex.split(line)[2:][5] == "the machine's disk"  # still one argument for a shell


def test_committed_results_files_are_clean():
    for path in sorted((REPO / "docs" / "results").rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        for bad in ("'\"'\"'", ".gpu/", "/root/", "/tmp/", "shared/data"):
            assert bad not in text, f"{path.relative_to(REPO)} holds {bad!r}"


def test_a_script_without_its_data_says_so(load_script, monkeypatch):
    common = load_script("_common")
    with pytest.raises(SystemExit, match=r"pass --data PATH/conll2003 .* or set LAYERFUSE_CONLL2003"):
        common.conll_data(None)
    with pytest.raises(SystemExit, match="--data /nowhere/conll2003 is not a folder"):
        common.conll_data("/nowhere/conll2003")


def _hook():
    spec = importlib.util.spec_from_file_location("include_results", REPO / "docs_hooks" / "include_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_included_headings_go_below_their_section(tmp_path):
    hook = _hook()
    (tmp_path / "r.md").write_text("# Results\n\n```\n# not a heading\n```\n\n## Table\n\n| a |\n")
    page = "# Page\n\n## Section\n\n--8<-- \"r.md\"\n\n## Next\n\n??? note\n    --8<-- \"r.md\"\n"
    config = {"config_file_path": str(tmp_path / "mkdocs.yml"),
              "mdx_configs": {"pymdownx.snippets": {"base_path": ["."]}}}
    out = hook.on_page_markdown(page, SimpleNamespace(file=SimpleNamespace(src_path="p.md")), config, None)
    assert out.splitlines()[4:11] == ["### Results", "", "```", "# not a heading", "```", "", "#### Table"]
    assert "    ### Results" in out.splitlines()  # inside the admonition, indented as the include was
    with pytest.raises(FileNotFoundError, match="missing.md"):
        hook.on_page_markdown('--8<-- "missing.md"', SimpleNamespace(file=SimpleNamespace(src_path="p.md")),
                              config, None)
