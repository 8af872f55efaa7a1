"""A pack's step gathers every head's rows at once (`PackRows`): the batch equals each head's own
packed batch padded to one shape, in every storage dtype, for all the heads or some of them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layerfuse.cache.reader import open_entry
from layerfuse.extract.run import ExtractConfig, extract
from layerfuse.training import load_data
from layerfuse.training.pack_batches import PackRows
from layerfuse.training.packed import _padded


@pytest.fixture(scope="module", params=["float16", "int8", "bfloat16"])
def entry(request, tmp_path_factory, tiny_bert_dir, tiny_conll_dir):
    root = tmp_path_factory.mktemp(request.param)
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(root),
                           unit_rows=256, dtype=request.param)
    return open_entry(extract(config, progress=False, log=lambda m: None).path)


@pytest.mark.parametrize("heads", [[0, 1, 2], [2, 0]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_gather_equals_each_heads_own_batch(entry, heads, dtype):
    train = load_data(entry).train
    samples = [train.select(np.arange(a, b)) for a, b in ((0, 5), (5, 12), (12, 15))]  # three runs' samples
    orders = {0: np.array([2, 0, 4]), 1: np.array([6, 1]), 2: np.array([0, 1, 2])}
    hidden, mask, labels, lengths = PackRows(samples).batch([orders[k] for k in heads], heads=heads, device="cpu",
                                                            dtype=dtype, multiple=8)
    own = [samples[k].batch(orders[k], device="cpu", packed=True, multiple=8) for k in heads]
    expected = _padded(own, dtype=dtype)
    assert hidden.dtype == dtype and hidden.shape[:3] == (len(heads), 1, hidden.shape[2])
    assert hidden.shape[2] % 8 == 0 and mask[:, 0].sum(1).tolist() == [int(b.mask.sum()) for b in own]
    for got, want in zip((hidden, mask, labels), expected):
        assert torch.equal(got, want)
    assert [ls.tolist() for ls in lengths] == [b.lengths.tolist() for b in own]


def test_runs_on_all_of_train_share_it_uncopied(entry):
    # N = all: every run's train is the held split itself; a pack must not hold K copies of it
    from layerfuse.training import TrainConfig
    from layerfuse.training.loop import prepare_run

    data = load_data(entry)
    runs = [prepare_run(TrainConfig(fusion="concat", shots=None, epochs=1, seed=seed, device="cpu"), data)
            for seed in (0, 1, 2)]
    rows = PackRows([r.train for r in runs])
    assert rows.split is runs[0].train and rows.first.tolist() == [0, 0, 0]
    order = np.array([4, 1])
    hidden, mask, labels, _ = rows.batch([order, order], heads=[0, 2], device="cpu", dtype=torch.float32, multiple=8)
    own = runs[0].train.batch(order, device="cpu", packed=True, multiple=8)
    assert torch.equal(hidden[0], own.hidden) and torch.equal(hidden[1], own.hidden)
    assert torch.equal(labels[1], own.labels) and torch.equal(mask[1], own.mask)
