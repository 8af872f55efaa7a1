"""The CPU dropout: nn.Dropout's contract with a cheaper mask."""

import pytest
import torch

from layerfuse.fusions.dropout import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_drops_a_fraction_p_in_every_lane_and_keeps_the_mean(p):
    torch.manual_seed(0)
    x = torch.ones(400_000)
    y = dropout(x, p)
    dropped = y == 0
    assert abs(dropped.float().mean().item() - p) < 3e-3  # ~10 standard errors
    # each of the four 16-bit lanes of a 64-bit draw is used: none may be biased
    for lane in range(4):
        assert abs(dropped[lane::4].float().mean().item() - p) < 6e-3
    assert torch.allclose(y[~dropped], torch.full_like(y[~dropped], 1 / (1 - p)))
    assert abs(y.mean().item() - 1) < 0.02  # inverted dropout keeps the expectation


def test_masks_follow_the_seed_and_gradients_follow_the_mask():
    x = torch.randn(3, 1000, requires_grad=True)
    torch.manual_seed(1)
    a = dropout(x, 0.1)
    torch.manual_seed(1)
    b = dropout(x, 0.1)
    assert torch.equal(a, b)
    assert not torch.equal(a, dropout(x, 0.1))  # the generator moved on
    a.sum().backward()
    assert torch.equal(x.grad == 0, a == 0)


def test_module_is_identity_outside_training_and_keeps_dtype():
    module = Dropout(0.1)
    x = torch.randn(64, 8, dtype=torch.bfloat16)
    assert module(x).dtype == torch.bfloat16 and not torch.equal(module(x), x)
    assert torch.equal(module.eval()(x), x)
    assert torch.equal(Dropout(0.0)(x), x)
    assert Dropout(0.1).state_dict() == {}
