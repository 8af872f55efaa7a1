"""A training step never waits for the device: no tensor is turned into a host value (``.item()``,
``.tolist()``, ``int(t)``, ``bool(t)``, ``.cpu()``, ``.numpy()``) inside a step of any head. On CPU
the conversions are counted (a torch function mode sees every one); on CUDA the step runs under
``torch.cuda.set_sync_debug_mode("error")``, which raises on any synchronising call."""

from __future__ import annotations

import traceback

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from layerfuse.cache.reader import open_entry
from layerfuse.fusions import FUSIONS
from layerfuse.training import TrainConfig, load_data
from layerfuse.training.loop import prepare_run, train_step

TO_HOST = {"item", "tolist", "cpu", "numpy", "__int__", "__bool__", "__float__", "__index__"}


class CountToHost(TorchFunctionMode):
    """Records each tensor-to-host conversion, with the line that asked for it."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in TO_HOST:
            self.calls.append((func.__name__, "".join(traceback.format_stack(limit=4)[:-1])))
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def data(tiny_cache):
    return load_data(open_entry(tiny_cache))


def _run(data, fusion: str, device: str, **options):
    config = TrainConfig(**{"fusion": fusion, "shots": 4, "epochs": 2, "seed": 0, "lr": 1e-3, "device": device,
                            "batch_size": 4, **options})
    run = prepare_run(config, data)
    run.model.train()
    return run


@pytest.mark.parametrize("fusion", sorted(FUSIONS))
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_training_step_makes_no_tensor_a_host_value(data, fusion, precision):
    run = _run(data, fusion, "cpu", precision=precision)
    steps = list(run.epoch_batches())
    assert len(steps) >= 3
    train_step(run, steps[0])  # the first step may set things up (kernels, a batch's shape)
    with CountToHost() as seen:
        for order in steps[1:]:
            train_step(run, order)
    assert not seen.calls, f"{fusion}: {len(seen.calls)} tensor-to-host conversions in a step, the first:\n" \
                           f"{seen.calls[0][0]} at\n{seen.calls[0][1]}"
    assert torch.isfinite(run.last_loss)


def test_the_counter_sees_a_conversion():
    with CountToHost() as seen:
        int(torch.arange(3).max())
    assert [name for name, _ in seen.calls] == ["__int__"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("fusion", sorted(FUSIONS))
def test_a_cuda_training_step_never_synchronises(data, fusion):
    run = _run(data, fusion, "cuda", precision="bf16")
    steps = list(run.epoch_batches())
    train_step(run, steps[0])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for order in steps[1:]:
            train_step(run, order)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert np.isfinite(float(run.last_loss))


def _pack(data, fusion: str, device: str, **options):
    """Three runs of ``fusion`` (seeds 0..2, one at N=8: its own schedule) as a pack, and a step of it."""
    from layerfuse.training.packed import Pack, PackOptimizer

    runs = [_run(data, fusion, device, seed=seed, **options) for seed in (0, 1)]
    runs.append(_run(data, fusion, device, seed=2, shots=8, **options))
    pack = Pack([r.head for r in runs], [r.train for r in runs])
    optimizer = PackOptimizer(pack, runs)
    pack.train(True)
    orders = [list(r.epoch_batches()) for r in runs]
    heads = list(range(len(runs)))

    def step(i: int, heads=heads):  # heads: fewer when the others are past their last step (the first
        # ones when a pack is ordered longest first, as `train_pack` orders it: a slice of the stacks)
        return pack.step([runs[k] for k in heads], [orders[k][i] for k in heads], heads=heads, optimizer=optimizer)

    return pack, step


PACKED = sorted(f for f, cls in FUSIONS.items() if cls.packs())


@pytest.mark.parametrize("fusion", PACKED)
def test_a_packed_step_makes_no_tensor_a_host_value(data, fusion):
    pack, step = _pack(data, fusion, "cpu", precision="bf16")
    assert pack.rows is not None  # every head's rows gathered at once
    step(0)
    with CountToHost() as seen:
        losses = [step(1), step(2), step(0, heads=[0, 2]), step(1, heads=[0, 1])]  # indexed, then the first
    assert not seen.calls, f"{fusion}: {len(seen.calls)} tensor-to-host conversions in a packed step, the first:\n" \
                           f"{seen.calls[0][0]} at\n{seen.calls[0][1]}"
    assert torch.isfinite(losses[-1]).all()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("fusion", PACKED)
def test_a_cuda_packed_step_never_synchronises(data, fusion):
    _, step = _pack(data, fusion, "cuda", precision="bf16")
    step(0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        losses = [step(1), step(2), step(0, heads=[0, 2]), step(1, heads=[0, 1])]  # indexed, then the first
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(losses[-1]).all().item()


def test_an_ft_step_makes_no_tensor_a_host_value(tiny_cache):
    # FT builds its batch from the live backbone (tokens, windows, word rows): planned on the host
    # from the split's own arrays, never from the device's outputs. The backbone's own forward may
    # look (transformers checks whether an attention mask has padding): that is the model's, not ours.
    from layerfuse.finetune.data import live_data
    from layerfuse.finetune.live import load_live_backbone

    entry = open_entry(tiny_cache)
    backbone = load_live_backbone(entry.meta, device="cpu")
    data = live_data(entry, backbone, layers=range(1, entry.num_layers + 1))
    run = _run(data, "concat", "cpu", mode="ft", lr=5e-5)
    steps = list(run.epoch_batches())
    train_step(run, steps[0])
    with CountToHost() as seen:
        for order in steps[1:]:
            train_step(run, order)
    ours = [(name, where) for name, where in seen.calls if "/transformers/" not in where]
    assert not ours, f"{len(ours)} tensor-to-host conversions in an FT step, the first:\n{ours[0][0]} at\n{ours[0][1]}"
