"""The activation store: the budget read from the device, one read per split per process, views
for fewer layers, held equals streamed."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch
from store_checks import held_and_streamed_dev_f1

from layerfuse.cache.reader import CacheSplit, open_entry
from layerfuse.errors import LayerfuseError
from layerfuse.training import TrainConfig, budget, load_data, store, train_head
from layerfuse.training.arrays import SplitArrays


@pytest.fixture
def entry(tiny_cache):
    return open_entry(tiny_cache)


@pytest.fixture
def reads(monkeypatch):
    """Bytes of hidden states read from the cache, counted where every read passes."""
    counted = {"bytes": 0}
    original = CacheSplit._read_layer

    def read_layer(self, layer, rows):
        values = original(self, layer, rows)
        counted["bytes"] += values.nbytes
        return values

    monkeypatch.setattr(CacheSplit, "_read_layer", read_layer)
    return counted


def test_the_budget_on_cuda_is_a_share_of_the_gpus_free_memory(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (40 << 30, 80 << 30))
    monkeypatch.setattr(budget, "host_available_bytes", lambda: 100 << 30)
    assert budget.memory_budget("cuda") == int(budget.BUDGET_FRACTION * (40 << 30))
    monkeypatch.setattr(budget, "host_available_bytes", lambda: 10 << 30)  # a held split passes through the host
    assert budget.memory_budget("cuda") == int(budget.BUDGET_FRACTION * (10 << 30))


def test_the_budget_on_a_cpu_is_a_share_of_the_available_memory(monkeypatch):
    monkeypatch.setattr(budget, "host_available_bytes", lambda: 24 << 30)
    assert budget.memory_budget("cpu") == int(budget.BUDGET_FRACTION * (24 << 30))


def test_the_hosts_available_memory_is_read():
    import os

    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < budget.host_available_bytes() <= physical


def test_the_budget_can_be_set_by_hand(monkeypatch):
    monkeypatch.setenv(budget.ENV, "1.5G")
    assert budget.memory_budget("cpu") == int(1.5 * (1 << 30))
    monkeypatch.setenv(budget.ENV, "4096")
    assert budget.memory_budget("cpu") == 4096
    monkeypatch.setenv(budget.ENV, "lots")
    with pytest.raises(LayerfuseError, match="LAYERFUSE_MEMORY_BUDGET='lots'"):
        budget.memory_budget("cpu")


def test_the_evaluation_batch_on_a_gpu_grows_with_its_free_memory(monkeypatch):
    monkeypatch.setattr(budget, "free_bytes", lambda device=None: 70 * 10**9)
    big = budget.eval_sentences(24 * 1024 * 4, "cuda")  # roberta-large shape, float32 rows
    monkeypatch.setattr(budget, "free_bytes", lambda device=None: 2 * 10**9)
    small = budget.eval_sentences(24 * 1024 * 4, "cuda")
    assert 600 < big < 800 and small == 64


def test_splits_that_fit_are_held_and_the_rest_stream(entry, monkeypatch):
    monkeypatch.setattr(budget, "host_available_bytes", lambda: 1 << 40)
    held = load_data(entry)
    assert not held.dev.streamed and not held.train.streamed
    store.clear()
    monkeypatch.setattr(budget, "host_available_bytes", lambda: 0)
    streamed = load_data(entry)
    assert streamed.dev.streamed and streamed.train.streamed  # the same type, held or streamed
    assert isinstance(streamed.dev, SplitArrays) and isinstance(held.dev, SplitArrays)


def test_a_second_load_in_the_process_reads_no_hidden_states(entry, reads):
    first = load_data(entry)
    read_once = reads["bytes"]
    assert read_once > 0
    second = load_data(entry)
    assert reads["bytes"] == read_once
    assert second.dev is first.dev and second.train is first.train
    # fewer layers of what is held: a view, not a read
    top = load_data(entry, layers=[entry.num_layers])
    assert reads["bytes"] == read_once
    assert np.array_equal(top.dev.hidden[:, 0], first.dev.hidden[:, -1])


def test_a_second_run_reads_nothing_and_scores_the_same(entry, reads):
    config = TrainConfig(fusion="concat", shots=4, epochs=2, seed=0, lr=1e-2)
    first = train_head(config, load_data(entry))
    read_once = reads["bytes"]
    second = train_head(config, load_data(entry))
    assert reads["bytes"] == read_once
    assert second.best_dev_f1 == first.best_dev_f1 and second.evals == first.evals


def test_clear_store_gives_back_the_splits_a_host_has_dropped(entry):
    """The store kept the splits of a notebook's runs for the life of the process after it had dropped
    its data and results, and nothing public or documented let them go: `clear_store` does."""
    from layerfuse.training import clear_store

    data = load_data(entry)
    result = train_head(TrainConfig(fusion="concat", shots=4, epochs=1, seed=0, lr=1e-2), data)
    held = [weakref.ref(split.hidden) for split in (data.train, data.dev, data.test)]
    del data, result
    gc.collect()
    assert store.held_bytes() > 0 and all(ref() is not None for ref in held)  # kept, nothing of the host's left
    clear_store()
    gc.collect()
    assert store.held_bytes() == 0 and all(ref() is None for ref in held)


def test_held_and_streamed_score_alike(entry, monkeypatch):
    config = TrainConfig(fusion="dwatt", shots=None, epochs=2, seed=0, lr=1e-2, eval_points=2)
    held, streamed = held_and_streamed_dev_f1(entry, config, monkeypatch)
    assert streamed == pytest.approx(held, abs=1e-12)


def test_the_store_keeps_within_its_budget(entry, monkeypatch):
    split = entry.split("dev")
    one = split.stored_nbytes(rows=split.n_rows, layers=1)
    monkeypatch.setattr(budget, "MEMORY_BUDGET_BYTES", int(1.5 * one))
    a = store.open_split(split, sentences=None, layers=[1])
    store.open_split(split, sentences=None, layers=[2])  # a second layer: the first one is let go
    assert store.held_bytes() <= 1.5 * one
    assert store.open_split(entry.split("dev"), sentences=None, layers=[1]) is not a


def test_a_streamed_pass_reads_the_next_block_while_this_one_computes(entry, monkeypatch):
    from layerfuse.training.evaluation import score

    monkeypatch.setattr(budget, "MEMORY_BUDGET_BYTES", 0)
    monkeypatch.setattr(budget, "BLOCK_ROWS", 64)
    held_result = train_head(TrainConfig(fusion="concat", shots=4, epochs=1, seed=0, lr=1e-2), load_data(entry))
    streamed = load_data(entry).dev.take_layers(held_result.layers)
    assert streamed.streamed
    ahead = []
    real = SplitArrays._read_block

    def read_block(self, key):
        ahead.append(key)
        return real(self, key)

    monkeypatch.setattr(SplitArrays, "_read_block", read_block)
    kw = dict(device="cpu", label_names=entry.label_names, batch_size=4)
    for tagger in (held_result.tagger,):
        f1, loss = score(tagger, streamed, **kw)
    keys = sorted(set(streamed.block_keys().tolist()))
    assert len(keys) > 2 and ahead == keys  # each block read once, in order
    assert not streamed._pending and not streamed._blocks  # nothing kept after the pass
    store.clear()
    monkeypatch.setattr(budget, "MEMORY_BUDGET_BYTES", None)
    held = load_data(entry).dev.take_layers(held_result.layers)
    assert not held.streamed and score(held_result.tagger, held, **kw) == (f1, loss)


def test_the_pinned_buffers_grow_together_so_a_second_pass_allocates_nothing(monkeypatch):
    # Which buffer a block lands in depends on whether the read-ahead thread or the step asked first:
    # a buffer sized by its own blocks alone was allocated again on a later pass (seen on an H200).
    from layerfuse.training.staging import PinnedStaging

    allocations = []
    monkeypatch.setattr(PinnedStaging, "_allocate",
                        staticmethod(lambda n: allocations.append(n) or torch.empty(n, dtype=torch.uint8)))
    staging = PinnedStaging()
    blocks = [300, 700, 200, 500, 100]  # bytes; an odd count, so the next pass starts on the other buffer
    for size in blocks:
        staging._fit(size)
    assert [b.numel() for b in staging._buffers] == [700, 700]
    first = list(allocations)
    for size in reversed(blocks):  # the same blocks, each in the other buffer
        staging._fit(size)
    assert allocations == first == [300, 300, 700, 700]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_streamed_blocks_pass_through_pinned_buffers_allocated_once(entry, monkeypatch):
    from layerfuse.training import staging
    from layerfuse.training.evaluation import score

    monkeypatch.setattr(budget, "BLOCK_ROWS", 64)  # first: held and streamed then batch alike (same numbers)
    result = train_head(TrainConfig(fusion="concat", shots=4, epochs=1, seed=0, lr=1e-2), load_data(entry))
    tagger = result.tagger.to("cuda")
    kw = dict(device="cuda", label_names=entry.label_names, batch_size=4)
    held = score(tagger, load_data(entry).dev.take_layers(result.layers), **kw)
    store.clear()
    monkeypatch.setattr(budget, "MEMORY_BUDGET_BYTES", 0)
    streamed = load_data(entry).dev.take_layers(result.layers)
    assert streamed.streamed and score(tagger, streamed, **kw) == held
    buffers = [b.data_ptr() for b in staging.staging()._buffers]
    assert score(tagger, streamed, **kw) == held
    assert [b.data_ptr() for b in staging.staging()._buffers] == buffers  # reused, not allocated again
    assert all(b.is_pinned() for b in staging.staging()._buffers)


def test_streamed_splits_are_not_kept_so_runs_in_a_loop_hold_no_entry_open(tiny_cache, monkeypatch):
    """A streamed split counts no bytes, so the store never let one go: each run of a notebook's loop added
    its splits, each holding its entry open (a descriptor and a read lock that `gc` and `rm` then meet),
    until `Too many open files`."""
    monkeypatch.setattr(budget, "host_available_bytes", lambda: 0)  # every split streams
    for layers in ([1], [2], [1, 2]):
        config = TrainConfig(fusion="concat", shots=2, epochs=1, seed=0, lr=1e-2, layers=",".join(map(str, layers)))
        with open_entry(tiny_cache) as opened:
            data = load_data(opened, layers=layers)
            assert data.dev.streamed
            train_head(config, data)
    del data
    gc.collect()
    assert len(store._HELD) == 0


def test_clear_store_lets_the_pinned_staging_buffers_go(monkeypatch):
    """The pinned host buffers that stage streamed blocks for a GPU grow to the largest block and stayed for
    the life of the process: `clear_store` did not free them. Freed, their blocks stay pinned in torch's
    cache of pinned memory, which it empties too (where CUDA is in use)."""
    from layerfuse.training import clear_store, staging

    emptied = []
    monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: emptied.append(True), raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    first = staging.staging()
    assert staging.staging() is first
    clear_store()
    assert staging.staging() is not first and emptied == [True]
