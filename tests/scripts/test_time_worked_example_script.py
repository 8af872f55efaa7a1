"""scripts/time_worked_example.py reads the README's worked example as a reader does: every command of
its bash block, in order, with the step it belongs to (running them all is the script's job, minutes)."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_worked_example_commands_are_read_in_order(load_script):
    steps = load_script("time_worked_example").commands(README.read_text(encoding="utf-8"))
    assert steps[0] == ("1", "extract")
    assert [s for s, _ in steps] == sorted(s for s, _ in steps) and {s for s, _ in steps} >= {"1", "2", "3", "4", "5"}
    assert any(c.startswith("layerfuse sweep --report") for _, c in steps)
    assert not any("#" in c for _, c in steps)  # comments are not commands
