"""What every script of scripts/ keeps to: helpers shared through scripts/_common.py or the library,
never by importing another script or a private name; results written under docs/results/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
NAMES = sorted(p.stem for p in SCRIPTS.glob("*.py"))


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            for alias in node.names:
                yield node.module, alias.name


@pytest.mark.parametrize("name", NAMES)
def test_no_script_imports_another_script_or_a_private_name(name):
    others = {n for n in NAMES if n != "_common"} - {name}
    for module, imported in _imports(SCRIPTS / f"{name}.py"):
        assert module.split(".")[0] not in others, f"{name}.py imports the script {module}"
        assert imported is None or not imported.startswith("_"), f"{name}.py imports the private {module}.{imported}"


@pytest.mark.parametrize("name", NAMES)
def test_results_go_to_docs_results(name):
    text = (SCRIPTS / f"{name}.py").read_text(encoding="utf-8")
    assert 'REPO / "docs" /' not in text.replace('REPO / "docs" / "results"', ""), \
        f"{name}.py writes under docs/ outside docs/results"
