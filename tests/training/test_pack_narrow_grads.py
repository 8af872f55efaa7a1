"""A bf16 pack step computes with its weights cast once, as leaves of their own, and widens their
gradients into the float32 leaves while it clips them (`Pack.narrow_weights`, `widen_grads`): the
same gradients, clip and update as casting inside autograd and clipping after, bit for bit on a CPU
(on CUDA, where it is the default, to float32 rounding: its norms may reduce in another order)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from layerfuse.fusions import FUSIONS, FusionConfig, TokenTagger
from layerfuse.training import TrainConfig, packed
from layerfuse.training.packed import Pack, PackOptimizer

K, L, D, R = 4, 3, 16, 12
CASTING = sorted(name for name, cls in FUSIONS.items() if cls.casts_stacked_weights)


def _pack(fusion: str, device: str = "cpu") -> tuple[Pack, PackOptimizer]:
    taggers = []
    for seed in range(K):
        torch.manual_seed(seed)
        config = FusionConfig(n_layers=L, dim=D, num_heads=2, ffn_dim=32, extra_layers=1, dropout=0.0,
                              layer_score="scaled")
        taggers.append(TokenTagger(fusion=fusion, n_labels=5, **vars(config)).to(device))
    pack = Pack(taggers)
    pack.train(True)
    # two schedules (two heads each), as a cell's caps: the second one's heads stop first
    runs = [SimpleNamespace(config=TrainConfig(fusion=fusion, shots=None, epochs=1, seed=k, lr=1e-2), head=t,
                            total_steps=10 if k < 2 else 5) for k, t in enumerate(taggers)]
    return pack, PackOptimizer(pack, runs)


def _batch(device: str = "cpu"):
    gen = torch.Generator().manual_seed(0)
    hidden = (10 * torch.randn(K, 1, R, L, D, generator=gen)).to(torch.bfloat16)  # large: the clip bites
    mask = torch.ones(K, 1, R, dtype=torch.bool)
    labels = torch.randint(0, 5, (K, 1, R), generator=gen)
    return hidden.to(device), mask.to(device), labels.to(device), [torch.tensor([5, 7])] * K


DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA")])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fusion", CASTING)
@pytest.mark.parametrize("active", [K, 2])
def test_narrow_gradients_equal_casting_inside_autograd(fusion, active, device, monkeypatch):
    monkeypatch.setitem(packed.NARROW_GRADS, device, True)  # on the CPU too: the GPU's way
    same = torch.equal if device == "cpu" else lambda a, b: torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    hidden, mask, labels, lengths = _batch(device)
    heads = list(range(active))
    batch = (hidden[:active], mask[:active], labels[:active], lengths[:active])
    stepped = {}
    for way in ("narrow", "autograd"):
        pack, optimizer = _pack(fusion, device)
        if way == "autograd":
            monkeypatch.setattr(pack, "narrow_weights", lambda heads, dtype: None)
        captured = {}
        step = optimizer.step

        def spy(heads, captured=captured, pack=pack, step=step):
            captured.update({group: t.grad.clone() for group, t in pack.flat.items()})
            step(heads)

        monkeypatch.setattr(optimizer, "step", spy)
        for _ in range(2):
            pack.step_on(*batch, heads=heads, optimizer=optimizer,
                         autocast=torch.autocast(device, dtype=torch.bfloat16), max_grad_norm=0.5)
        stepped[way] = (captured, {group: t.detach().clone() for group, t in pack.flat.items()})
    (grads, weights), (grads_ref, weights_ref) = stepped["narrow"], stepped["autograd"]
    for group in grads_ref:
        assert grads[group].dtype == torch.float32
        assert same(grads[group], grads_ref[group]), group
        assert torch.equal(grads[group][active:], torch.zeros_like(grads[group][active:]))
        assert same(weights[group], weights_ref[group]), group
    total = torch.stack([g.norm(dim=1) for g in grads.values()]).norm(dim=0)[:active]
    assert torch.allclose(total, torch.full_like(total, 0.5), rtol=1e-3)  # clipped to the max norm


def test_float32_packs_and_fusions_that_cast_weight_by_weight_keep_autograd(monkeypatch):
    pack, _ = _pack(CASTING[0])
    assert pack.narrow_weights([0, 1], torch.bfloat16) is None  # not on a CPU (`NARROW_GRADS`)
    monkeypatch.setitem(packed.NARROW_GRADS, "cpu", True)
    assert pack.narrow_weights([0, 1], torch.float32) is None
    assert pack.narrow_weights([1, 2], torch.bfloat16) is None  # not the first heads
    narrow = pack.narrow_weights([0, 1], torch.bfloat16)
    assert all(t.dtype == torch.bfloat16 and t.is_leaf and t.shape[0] == 2 for t in narrow.values())
    others = [name for name, cls in FUSIONS.items() if not cls.casts_stacked_weights and cls.stacked_forward]
    for name in others:
        assert _pack(name)[0].narrow_weights([0], torch.bfloat16) is None
