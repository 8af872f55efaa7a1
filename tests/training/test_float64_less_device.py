"""A device without float64 (MPS) trains, scores and times a head: every sum kept on the device over a
split accumulates in `layerfuse.device.accumulator_dtype`, and the run's clock waits for that device.

No Mac here, so the CPU stands in: `NO_FLOAT64` is told the CPU lacks float64, and a torch function mode
refuses, as MPS does ("Cannot convert a MPS Tensor to float64 dtype"), any float64 tensor made on it."""

from __future__ import annotations

import math
import traceback

import pytest
import torch
from mlm_fixtures import tiny_mlm_bert_dir, tiny_mlm_cache, tiny_text_dir  # noqa: F401 (fixtures)
from torch.overrides import TorchFunctionMode

from layerfuse import device as devices
from layerfuse import precision
from layerfuse.cache.reader import open_entry
from layerfuse.fusions import FUSIONS
from layerfuse.training import TrainConfig, load_data, runtime, train_head

pytestmark = pytest.mark.usefixtures("one_thread")


class RefuseFloat64(TorchFunctionMode):
    """Raises, as MPS does, where a call returns a float64 tensor on the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.device.type == "cpu":
                raise TypeError(f"Cannot convert a MPS Tensor to float64 dtype ({getattr(func, '__name__', func)})\n"
                                + "".join(traceback.format_stack(limit=6)[:-1]))
        return out


@pytest.fixture
def cpu_without_float64(monkeypatch):
    monkeypatch.setattr(devices, "NO_FLOAT64", frozenset({"cpu", "mps"}))


def test_the_mode_refuses_float64():
    with RefuseFloat64(), pytest.raises(TypeError, match="float64"):
        torch.zeros(2, dtype=torch.float64)


def test_the_sums_dtype_is_float64_except_on_mps():
    assert devices.accumulator_dtype("cpu") == devices.accumulator_dtype(torch.device("cuda:1")) == torch.float64
    assert devices.accumulator_dtype("mps") == torch.float32


@pytest.mark.parametrize("fusion", sorted(FUSIONS))
def test_every_head_trains_and_is_scored_without_float64(tiny_cache, cpu_without_float64, fusion):
    """Training, each evaluation's loss sums and the layer usage at the best dev point (concat's
    contribution, dwatt's weights): no float64 on the device."""
    data = load_data(open_entry(tiny_cache))
    with RefuseFloat64():
        result = train_head(TrainConfig(fusion=fusion, shots=4, epochs=1, seed=0, batch_size=4), data)
    assert math.isfinite(result.best_dev_f1)


def test_mlm_is_scored_without_float64(tiny_mlm_cache, cpu_without_float64):
    data = load_data(open_entry(tiny_mlm_cache))
    with RefuseFloat64():
        result = train_head(TrainConfig(fusion="concat", task="mlm", shots=8, epochs=1, seed=0, batch_size=8), data)
    assert math.isfinite(result.best_dev_ppl)


@pytest.mark.parametrize("clock", [runtime.now, precision._synced])
def test_the_clock_waits_for_any_accelerator(monkeypatch, clock):
    """`now` (train and eval seconds) and the precision probe's timer wait for MPS's queue as for CUDA's."""
    waited = []
    monkeypatch.setattr(torch.accelerator, "synchronize", waited.append)
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)
    clock(torch.device("cpu"))
    assert waited == []  # the host queues nothing
    clock(torch.device("mps"))
    assert waited == [torch.device("mps")]
