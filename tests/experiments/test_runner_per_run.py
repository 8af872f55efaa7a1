"""`run_grid(load_per_run=True)`: each run loads its own data (timed into its record), `annotate`
sees that data, and both work in worker processes too (everything handed over by name)."""

from __future__ import annotations

import pytest

from layerfuse.cache.reader import open_entry
from layerfuse.experiments import grid, load_run, run_grid
from layerfuse.training import TrainConfig

LOADS: list[list] = []


def counting_load(entry, configs):
    LOADS.append([c.layers for c in configs])
    return load_run(entry, configs)


def note_layers(config, data, record):
    record["dev_layers_loaded"] = list(data.dev.layers)


@pytest.mark.parametrize("workers", [0, pytest.param(1, marks=pytest.mark.slow)])  # 1: a worker process
def test_each_run_loads_its_own_data(tiny_cache, tmp_path, workers):
    LOADS.clear()
    entry = open_entry(tiny_cache)
    base = TrainConfig(fusion="base", shots=2, epochs=1, seed=0, eval_points=1, device="cpu")
    configs = grid(fusions=["concat"], shots=[2], epochs=[1], trials=1, base=base, layers=["2", "all"])
    results = str(tmp_path / "runs.jsonl")
    records = run_grid(entry, configs, results=results, workers=workers, load=counting_load, load_per_run=True,
                       annotate=note_layers, progress=False, log=lambda m: None)

    by_layers = {r["config"]["layers"]: r for r in records.values()}
    assert by_layers["2"]["dev_layers_loaded"] == [2] and by_layers[None]["dev_layers_loaded"] == [1, 2]
    for r in records.values():
        assert r["wall_seconds"] >= r["seconds"]["total"] and r["wall_seconds"] >= r["load_seconds"] > 0
    assert LOADS == ([["2"], [None]] if workers == 0 else [])  # one load per run (in the workers there)


def counting_shared_load(entry, configs):
    LOADS.append("shared")
    return load_run(entry, configs)


def test_a_sweep_in_this_process_leaves_no_data_behind_and_the_next_loads_afresh(tiny_cache, tmp_path):
    """The data a sweep's runs shared outlived it (the train and dev states held for the process's life, a
    streamed split's entry open to `gc`), and the next sweep of the same runs on the same path reused it:
    after a relabel or a new extraction it trained on the old labels, in silence."""
    from layerfuse.experiments import runner

    LOADS.clear()
    base = TrainConfig(fusion="concat", shots=2, epochs=1, seed=0, eval_points=1, device="cpu")
    configs = grid(fusions=["concat"], shots=[2], epochs=[1], trials=1, base=base)
    for name in ("a", "b"):
        with open_entry(tiny_cache) as entry:
            run_grid(entry, configs, results=str(tmp_path / f"{name}.jsonl"), workers=0, load=counting_shared_load,
                     progress=False, log=lambda m: None)
        assert runner._DATA is None and runner._DATA_KEY is None and runner._ENTRY is None
    assert LOADS == ["shared", "shared"]


def test_a_worker_reused_for_another_state_of_the_entry_loads_again(tiny_cache):
    """Ray reuses a worker across sweeps: one that loaded a path before a relabel kept its old data."""
    from layerfuse.experiments import runner

    LOADS.clear()
    base = TrainConfig(fusion="concat", shots=2, epochs=1, seed=0, device="cpu")
    job = runner._Job(tiny_cache, counting_shared_load, stamp="before")
    try:
        for stamp in ("before", "before", "after the relabel"):
            runner._init_worker(runner.replace(job, stamp=stamp), [base], None)
        assert LOADS == ["shared", "shared"]
    finally:
        runner._DATA = runner._DATA_KEY = runner._ENTRY = None
