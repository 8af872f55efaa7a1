"""The activation store holds a split in its storage dtype (int8 with its scales, bfloat16 as its
bits) and widens each batch on the device: the bytes held are the stored bytes, and a batch's numbers
are the cache's own, exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from store_checks import held_and_streamed_dev_f1

from layerfuse.cache.reader import open_entry
from layerfuse.extract.run import ExtractConfig, extract
from layerfuse.training import TrainConfig, load_data, store

STORED = {"int8": (np.int8, 1), "bfloat16": (np.uint16, 2)}


@pytest.fixture(scope="module", params=sorted(STORED))
def entry(request, tmp_path_factory, tiny_bert_dir, tiny_conll_dir):
    root = tmp_path_factory.mktemp(request.param)
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(root),
                           unit_rows=256, dtype=request.param)
    return open_entry(extract(config, progress=False, log=lambda m: None).path)


def test_a_split_is_held_in_its_storage_dtype(entry):
    dev = load_data(entry).dev
    numpy_dtype, itemsize = STORED[entry.meta["dtype"]]
    assert dev.hidden.dtype == numpy_dtype
    values = dev.hidden.size * itemsize
    assert dev.nbytes == values + (dev.hidden.shape[0] * dev.hidden.shape[1] * 4 if dev.scales is not None else 0)
    assert (dev.scales is not None) == (entry.meta["dtype"] == "int8")
    assert store.held_bytes() >= dev.nbytes


@pytest.mark.parametrize("packed", [False, True])
def test_a_batch_is_widened_to_the_caches_own_numbers(entry, packed):
    dev = load_data(entry).dev
    positions = np.array([3, 0, 7])
    batch = dev.batch(positions, device="cpu", packed=packed)
    exact = entry.split("dev").hidden(sentences=dev.sentence_ids[positions], layers=list(dev.layers), dtype=np.float32)
    rows = batch.hidden[batch.mask]  # [rows, L, d], the sentences' rows in order
    assert rows.dtype == torch.float32
    assert torch.equal(rows, torch.from_numpy(exact))


def test_a_layer_reads_as_numbers(entry):
    dev = load_data(entry).dev
    exact = entry.split("dev").hidden(layers=[dev.layers[-1]], dtype=np.float32)[:, 0]
    assert np.array_equal(np.asarray(dev.layer(dev.layers[-1]), dtype=np.float32), exact)


def test_held_and_streamed_score_alike(entry, monkeypatch):
    config = TrainConfig(fusion="concat", shots=None, epochs=2, seed=0, lr=1e-2, eval_points=2)
    held, streamed = held_and_streamed_dev_f1(entry, config, monkeypatch)
    assert streamed == pytest.approx(held, abs=1e-12)
