"""The probes learn what is linearly there and nothing else; the expected-layer formulas on hand numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layerfuse.errors import LayerfuseError
from layerfuse.probing.expected import center_of_gravity, expected_layer, layer_deltas
from layerfuse.probing.probe import LinearProbe, ProbeConfig, ScalarMixProbe, predict, score, train_probe

pytestmark = pytest.mark.usefixtures("one_thread")
FAST = ProbeConfig(epochs=5, min_steps=300, lr=1e-2)


def _separable(n, *, dim=16, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    centers = np.random.default_rng(99).normal(0, 1, (classes, dim)) * 4
    x = centers[y] + rng.normal(0, 0.5, (n, dim))
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


def test_separable_features_are_learned():
    x, y = _separable(2000)
    xt, yt = _separable(1000, seed=1)
    probe = train_probe(LinearProbe.for_data(x, 4), x, y, config=FAST, seed=0)
    assert score(yt.numpy(), predict(probe, xt), kind="token")["acc"] > 0.98


def test_a_feature_without_signal_stays_at_the_majority_rate():
    rng = np.random.default_rng(0)
    prior = [0.7, 0.2, 0.1]
    y = torch.tensor(rng.choice(3, size=4000, p=prior))
    yt = rng.choice(3, size=2000, p=prior)
    x = torch.tensor(rng.normal(size=(4000, 8)), dtype=torch.float32)
    xt = torch.tensor(rng.normal(size=(2000, 8)), dtype=torch.float32)
    probe = train_probe(LinearProbe.for_data(x, 3), x, y, config=FAST, seed=0)
    acc = score(yt, predict(probe, xt), kind="token")["acc"]
    assert abs(acc - float(np.mean(yt == 0))) < 0.03


def test_scalar_mix_weighs_the_layer_that_carries_the_signal():
    x, y = _separable(2000, dim=8)
    rng = np.random.default_rng(1)
    layers = [torch.tensor(rng.normal(size=(2000, 8)), dtype=torch.float32) for _ in range(4)]
    layers[2] = x  # only layer 2 tells the classes apart
    stacked = torch.stack(layers, 1).half()  # [n, L + 1, d] float16, as the run holds it
    probe = train_probe(ScalarMixProbe.for_data(stacked, 4), stacked, y, config=FAST, seed=0)
    weights = probe.weights()
    assert np.argmax(weights) == 2 and weights[2] > 0.5
    assert abs(sum(weights) - 1) < 1e-6
    assert score(y.numpy(), predict(probe, stacked), kind="token")["acc"] > 0.95


def test_training_is_fixed_by_the_seed():
    x, y = _separable(500)
    config = ProbeConfig(epochs=1, min_steps=20)
    a, b, c = (train_probe(LinearProbe.for_data(x, 4), x, y, config=config, seed=s).linear.weight for s in (0, 0, 1))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_config_steps_and_checks():
    assert ProbeConfig(epochs=2, batch_size=100, min_steps=0).steps(250) == 6
    assert ProbeConfig(epochs=2, batch_size=100, min_steps=50).steps(250) == 50
    with pytest.raises(LayerfuseError, match="lr = -1"):
        ProbeConfig(lr=-1)
    for bad in ({"lr": "x"}, {"weight_decay": "x"}, {"weight_decay": float("inf")}):  # a TypeError before
        with pytest.raises(LayerfuseError, match=f"{next(iter(bad))} = .* must be a finite number"):
            ProbeConfig(**bad)
    with pytest.raises(LayerfuseError, match="batch_size = 0"):
        ProbeConfig(batch_size=0)
    x, y = _separable(10)
    with pytest.raises(LayerfuseError, match="outside 0..1"):
        train_probe(LinearProbe.for_data(x, 2), x, y + 2, config=FAST, seed=0)


def test_span_scores():
    names = ["O", "B-PER", "I-PER", "B-LOC"]
    gold = np.array([1, 2, 0, 3, 0, 1])  # PER(0-1), LOC(3) | PER(0)
    pred = np.array([1, 0, 0, 3, 0, 1])  # PER(0) wrong span, LOC right | PER right
    out = score(gold, pred, kind="span", label_names=names, counts=np.array([4, 2]))
    assert out["acc"] == pytest.approx(5 / 6)
    assert out["f1"] == pytest.approx(2 / 3)  # 2 of 3 gold, 2 of 3 predicted
    assert "f1" not in score(gold, pred, kind="token", counts=np.array([4, 2]))


def test_center_of_gravity_by_hand():
    assert center_of_gravity([0.1, 0.2, 0.3, 0.4]) == pytest.approx(2.0)  # 0.2 + 0.6 + 1.2
    assert center_of_gravity([1, 1]) == pytest.approx(0.5)  # normalised
    with pytest.raises(LayerfuseError):
        center_of_gravity([0, 0])


def test_expected_layer_by_hand():
    # gains: layer 1 +0.2, layer 2 +0.2, layer 3 -0.1 (counts as 0), layer 4 +0.3
    scores = [0.5, 0.7, 0.9, 0.8, 1.1]
    assert layer_deltas(scores) == pytest.approx([0, 0.2, 0.2, 0, 0.3])
    assert expected_layer(scores) == pytest.approx((1 * 0.2 + 2 * 0.2 + 4 * 0.3) / 0.7)
    assert expected_layer([0.9, 0.9, 0.8]) is None  # no layer gains on the one below
    assert expected_layer([0.0, 0.0, 1.0]) == pytest.approx(2.0)
