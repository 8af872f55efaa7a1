"""docs/guide/reliability.md is checked against the suite: every test file and test it cites exists,
so a row cannot outlive the test that provokes its fault."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cited(text: str) -> list[tuple[str, str | None]]:
    """(file or folder, test name or None) for each backticked citation; a bare `::name` refers to the
    last file cited before it in the same row."""
    out = []
    for row in text.splitlines():
        last = None
        for ref in re.findall(r"`((?:tests/|::)[^`]*)`", row):
            path, _, name = ref.partition("::")
            last = path or last
            out.append((last, name or None))
    return out


def test_every_cited_test_exists():
    refs = cited((ROOT / "docs" / "guide" / "reliability.md").read_text())
    assert len(refs) > 20
    missing = []
    for path, name in refs:
        target = ROOT / path
        if not target.exists():
            missing.append(path)
        elif name and not re.search(rf"^def {re.escape(name)}\(", target.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert missing == []
