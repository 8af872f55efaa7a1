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


def one_usage_error(result) -> str:
    """The ``Error:`` line of a click result refused as a wrong call (a bad option value, options that do not
    go together): exit 2, as click ends on the values it checks itself, no traceback, and no ``error:`` line
    of a failure."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not any(line.startswith("error:") for line in result.output.splitlines()), result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    return errors[0]
