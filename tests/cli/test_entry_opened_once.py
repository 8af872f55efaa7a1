"""A command opens its cache entry once: the opened entry is handed down to whatever reads it, and
nothing below reopens it from its path (train-head by path, by model and dataset, from a root's
listing; a sweep whose runs train in its own process, data loaded once or per run); each split of it
is opened once too."""

from __future__ import annotations

import os

import pytest
import zarr
from click.testing import CliRunner

from layerfuse.cache import reader
from layerfuse.cache.reader import open_entry
from layerfuse.cli.sweep import main as sweep
from layerfuse.cli.train import main as train_head
from layerfuse.experiments import runner
from layerfuse.experiments.loaders import load_run
from layerfuse.training.config import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")

# One short run: the opens are counted, not the numbers.
RUN = ["--shots", "2", "--epochs", "1", "--precision", "fp32", "--quiet"]
SPLITS = ["train", "dev", "test"]  # train (the sample's check), dev (its entities checked), then test


@pytest.fixture
def opens(monkeypatch) -> dict[str, list[str]]:
    """What the test opens from here on: every zarr group (``groups``: where each lives), every entry
    opened for reading (``entries``: their paths) and every split of one (``splits``: their names)."""
    seen = {"groups": [], "entries": [], "splits": []}
    open_group, init, open_split = zarr.open_group, reader.CacheEntry.__init__, reader.CacheSplit.__init__

    def counted_group(store=None, *args, **kwargs):
        seen["groups"].append(str(getattr(store, "where", store)).rstrip("/"))
        return open_group(store, *args, **kwargs)

    def counted_entry(self, path):
        seen["entries"].append(str(path))
        init(self, path)

    def counted_split(self, entry, name):
        seen["splits"].append(name)
        open_split(self, entry, name)

    monkeypatch.setattr(zarr, "open_group", counted_group)
    monkeypatch.setattr(reader.CacheEntry, "__init__", counted_entry)
    monkeypatch.setattr(reader.CacheSplit, "__init__", counted_split)
    return seen


def _train(args, tmp_path):
    result = CliRunner().invoke(train_head, [*args, *RUN, "--out", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    return result


def test_train_head_by_path_opens_its_entry_once(tiny_cache, tmp_path, opens):
    _train(["--cache", tiny_cache], tmp_path)
    assert opens == {"groups": [tiny_cache], "entries": [tiny_cache], "splits": SPLITS}


def test_train_head_by_model_and_dataset_opens_its_entry_once(tiny_cache, tiny_bert_dir, tiny_conll_dir, tmp_path,
                                                              opens):
    # The entry is there and finished: finding it, checking it needs nothing extracted and training from it
    # are one open (they were nine: a status, each split's state and summary, the label sets, the reader).
    _train(["--cache-dir", os.path.dirname(tiny_cache), "--model", str(tiny_bert_dir), "--dataset",
            str(tiny_conll_dir)], tmp_path)
    assert opens == {"groups": [tiny_cache], "entries": [tiny_cache], "splits": SPLITS}


def test_train_head_from_a_roots_listing_opens_the_chosen_entry_once(entry_copy, tmp_path, opens):
    _train(["--cache-dir", os.path.dirname(entry_copy)], tmp_path)
    # The listing reads each entry's attributes to choose one (a look at the root, no reader); the one
    # chosen is then opened once, and trained from.
    assert opens == {"groups": [entry_copy, entry_copy], "entries": [entry_copy], "splits": SPLITS}


def test_sweep_opens_its_entry_once(tiny_cache, tmp_path, opens, monkeypatch):
    # Its runs train in its own process (a worker process opens the entry once for itself).
    results = runner._results
    monkeypatch.setattr(runner, "_results", lambda *a, **k: results(*a, **{**k, "workers": 0}))
    result = CliRunner().invoke(sweep, ["--cache", tiny_cache, "--fusions", "base", "--shots", "2", "--epochs", "1",
                                        "--trials", "2", "--eval-points", "1", "--keep-heads", "none", "--quiet",
                                        "--precision", "fp32", "--out", str(tmp_path / "sweep")])
    assert result.exit_code == 0, result.output
    # Checking the samples, loading the data and scoring the layers on train share one train split.
    assert opens == {"groups": [tiny_cache], "entries": [tiny_cache], "splits": SPLITS}


def test_runs_loading_their_own_data_read_the_entry_handed_to_them(tiny_cache, tmp_path, opens):
    entry = open_entry(tiny_cache)
    configs = [TrainConfig(fusion="base", shots=2, epochs=1, seed=seed, eval_points=1) for seed in (0, 1)]
    records = runner.run_grid(entry, configs, results=str(tmp_path / "results.jsonl"), workers=0, load=load_run,
                              load_per_run=True, progress=False, log=lambda message: None)
    assert len(records) == 2
    # The test's own open alone; each run's data comes from the same splits.
    assert opens == {"groups": [tiny_cache], "entries": [tiny_cache], "splits": SPLITS}
