"""Grids of runs over one cache (`run_grid`, behind `sweep` and the scripts), their reports and plots."""

from .find import resolve_entry
from .loaders import load_cached, load_live, load_run
from .results import RESULTS, append_result, read_results, run_id, runs_on
from .runner import grid, run_grid, run_sweep

__all__ = ["resolve_entry", "load_cached", "load_live", "load_run", "RESULTS", "append_result", "read_results",
           "run_id", "runs_on", "grid", "run_grid", "run_sweep"]
