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
