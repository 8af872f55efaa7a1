"""What the fault tests read from a command's output (importable: tests/ is on sys.path beside its
conftest.py)."""

from __future__ import annotations


def one_error_line(result) -> str:
    """The single ``error:`` line of a click result that failed with exit 1 and no traceback."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]
