"""`layerfuse.fusions.stacked`: K heads of a fusion run as one equal each head run alone, on its own
packed rows (training) and on one shared padded batch (evaluation), outputs and gradients; and in
bfloat16 they stay within bfloat16's rounding of the solo heads."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from layerfuse.fusions import FUSIONS, FusionConfig, TokenTagger
from layerfuse.fusions.stacked import linear, stacked

K, L, D = 3, 4, 8
SMALL = dict(n_layers=L, dim=D, num_heads=2, ffn_dim=16, extra_layers=2, dropout=0.0)
LENGTHS = ([3, 5, 1], [4, 4], [2, 6, 1])  # each head's packed sentences: different rows per head
SHAPES = dict(B=3, T=6)


def heads(fusion: str, *, layer_score: str = "scaled") -> list[torch.nn.Module]:
    out = []
    for seed in range(K):
        torch.manual_seed(seed)
        config = FusionConfig(**SMALL, layer_score=layer_score)
        out.append(TokenTagger(fusion=fusion, n_labels=5, **vars(config)).fusion.double())
    return out


def run_stacked(modules, hidden, mask, *, shared: bool, lengths=None):
    params, buffers = torch.func.stack_module_state(modules)
    meta = copy.deepcopy(modules[0]).to("meta")
    out = stacked(meta, params, buffers, hidden, mask, k=len(modules), shared=shared, lengths=lengths)
    return out, params


def packed_rows(seed: int = 0):
    """``[K, 1, R, L, d]``, each head's sentences back to back, then padding (zeros)."""
    gen = torch.Generator().manual_seed(seed)
    R = max(sum(ls) for ls in LENGTHS) + 2
    hidden = torch.zeros(K, 1, R, L, D, dtype=torch.float64)
    for k, ls in enumerate(LENGTHS):
        hidden[k, 0, :sum(ls)] = torch.randn(sum(ls), L, D, generator=gen, dtype=torch.float64)
    mask = torch.zeros(K, 1, R, dtype=torch.bool)
    for k, ls in enumerate(LENGTHS):
        mask[k, 0, :sum(ls)] = True
    return hidden, mask, [torch.tensor(ls) for ls in LENGTHS]


def solo(module, hidden, mask, lengths=None):
    if lengths is not None and not module.token_wise:
        return module.forward_packed(hidden, lengths)
    return module(hidden, mask)


@pytest.mark.parametrize("fusion", sorted(FUSIONS))
def test_packed_rows_equal_each_head_alone(fusion):
    modules = heads(fusion)
    hidden, mask, lengths = packed_rows()
    out, params = run_stacked(modules, hidden, mask, shared=False, lengths=lengths)
    assert out.shape == (K, 1, hidden.shape[2], D)
    weights = torch.randn(out.shape, dtype=torch.float64)
    if params:  # base has none
        (out * weights * mask[..., None]).sum().backward()
    for k, module in enumerate(modules):
        alone = solo(module, hidden[k], mask[k], lengths[k])
        real = mask[k, 0]
        torch.testing.assert_close(out[k, 0, real], alone[0, real])
        if params:
            (alone * weights[k] * mask[k][..., None]).sum().backward()
        for name, p in module.named_parameters():
            torch.testing.assert_close(params[name].grad[k], p.grad, msg=f"{fusion} head {k}: {name}")


@pytest.mark.parametrize("fusion", sorted(name for name, cls in FUSIONS.items() if cls.shares_evaluation_batch))
def test_shared_batch_equals_each_head_alone(fusion):
    modules = heads(fusion)
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(SHAPES["B"], SHAPES["T"], L, D, generator=gen, dtype=torch.float64)
    mask = torch.ones(SHAPES["B"], SHAPES["T"], dtype=torch.bool)
    mask[1, 4:] = mask[2, 1:] = False
    with torch.no_grad():
        out, _ = run_stacked(modules, hidden, mask, shared=True)
        assert out.shape == (K, SHAPES["B"], SHAPES["T"], D)
        for k, module in enumerate(modules):
            torch.testing.assert_close(out[k][mask], module(hidden, mask)[mask])


@pytest.mark.parametrize("layer_score", ["paper", "learned"])
def test_dwatt_layer_scores(layer_score):
    modules = heads("dwatt", layer_score=layer_score)
    hidden, mask, lengths = packed_rows(2)
    with torch.no_grad():
        out, _ = run_stacked(modules, hidden, mask, shared=False, lengths=lengths)
        for k, module in enumerate(modules):
            torch.testing.assert_close(out[k], module(hidden[k], mask[k]))


@pytest.mark.parametrize("fusion", ["concat", "dwatt", "extra"])
def test_bfloat16_stays_within_rounding(fusion):
    modules = [m.float() for m in heads(fusion)]
    hidden, mask, lengths = packed_rows(3)
    hidden = hidden.float()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = run_stacked(modules, hidden, mask, shared=False, lengths=lengths)
    assert out.dtype == torch.bfloat16
    with torch.no_grad():
        for k, module in enumerate(modules):
            exact = solo(module, hidden[k], mask[k], lengths[k])[0][mask[k, 0]]
            gap = (out[k, 0][mask[k, 0]].float() - exact).abs().max() / exact.abs().max()
            assert gap < 0.05  # bfloat16 keeps 8 bits: a few of its 2^-8 steps through several products


def test_linear_weight_gradient_keeps_the_weight_layout():
    x = torch.randn(K, 7, 5, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(K, 4, 5, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(K, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: linear(*a), (x, weight, bias))
    linear(x, weight, bias).sum().backward()
    assert weight.grad.is_contiguous()
    torch.testing.assert_close(linear(x, weight, bias, shared=False)[1], x[1] @ weight[1].T + bias[1])
    torch.testing.assert_close(linear(x[0], weight, bias, shared=True)[2], x[0] @ weight[2].T + bias[2])


def test_extra_layers_attention_is_the_same_however_it_finds_the_sentences():
    # On a GPU the sentences of a batch attend all in one padded group ("padded"); on a CPU, in
    # groups of similar length. The rows that come out, and the gradients, are the same, and rows
    # in no sentence get zeros.
    from layerfuse.fusions.extra import _grouped_attention, _length_groups

    torch.manual_seed(0)
    lengths = np.array([3, 17, 9, 0, 40, 8, 33])
    starts = np.cumsum(lengths) - lengths + 5  # rows 0..4: before every sentence (no attention output)
    starts[2:] += 2  # and two rows between the second sentence and the third
    qkv = torch.randn(int(lengths.sum()) + 5 + 2 + 6, 3 * 32)
    outside = torch.ones(qkv.shape[0], dtype=torch.bool)
    for s, n in zip(starts, lengths):
        outside[s:s + n] = False
    plans = {method: _length_groups(lengths, device="cpu", starts=starts, method=method)
             for method in ("groups", "padded")}
    assert len(plans["groups"][0]) == 4 and len(plans["padded"][0]) == 1  # ceilings 8, 32, 16 and 64
    weights = torch.randn(qkv.shape[0], 32)
    out, grads = {}, {}
    for method, plan in plans.items():
        x = qkv.clone().requires_grad_()
        out[method] = _grouped_attention(x, plan, heads=4, p=0.0)
        (out[method] * weights).sum().backward()
        grads[method] = x.grad
    torch.testing.assert_close(out["padded"], out["groups"], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grads["padded"], grads["groups"], atol=1e-5, rtol=1e-5)
    assert (out["padded"][outside] == 0).all() and (out["padded"][~outside] != 0).all()
    assert (grads["padded"][outside] == 0).all()

