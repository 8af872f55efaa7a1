"""Control tasks: one label per word type, the same in every split, drawn from the task's label
distribution, fixed by the seed."""

from __future__ import annotations

import numpy as np
import pytest

from layerfuse.errors import LayerfuseError
from layerfuse.probing.control import ControlTask, label_distribution


def test_a_type_gets_the_same_label_in_every_split_and_in_any_order():
    task = ControlTask([0.5, 0.3, 0.2], seed=3)
    train = ["the", "Paris", "the", "met", "Paris", "the"]
    dev = ["Paris", "unseen", "the", "met"]
    ytrain, ydev = task(train), task(dev)
    mapping = {}
    for word, label in [*zip(train, ytrain), *zip(dev, ydev)]:
        assert mapping.setdefault(word, label) == label, word
    # A type first seen in dev gets the label it gets anywhere, whatever else is labelled with it.
    assert task(["unseen"])[0] == ydev[1] == task(["x", "y", "unseen"][::-1])[0]


def test_types_are_exact_strings():
    task = ControlTask(np.full(50, 1 / 50), seed=0)
    words = [f"Word{i}" for i in range(40)]
    upper, lower = task(words), task([w.lower() for w in words])
    assert (upper != lower).any()  # "Word3" and "word3" are two types, drawn apart


def test_labels_follow_the_task_distribution():
    p = np.array([0.6, 0.25, 0.1, 0.05, 0.0])
    task = ControlTask(p, seed=7)
    labels = task.type_labels([f"type{i}" for i in range(20000)])
    counts = np.bincount(labels, minlength=p.size)
    assert counts[4] == 0  # a label of zero probability is never drawn
    expected = p[:4] * labels.size
    chi2 = float(((counts[:4] - expected) ** 2 / expected).sum())
    assert chi2 < 16.27  # chi-square, 3 degrees of freedom, p = 0.001


def test_seed_fixes_the_task():
    words = [f"w{i}" for i in range(200)]
    a, b, c = ControlTask([0.5, 0.5], seed=1)(words), ControlTask([0.5, 0.5], seed=1)(words), ControlTask(
        [0.5, 0.5], seed=2)(words)
    assert (a == b).all()
    assert (a != c).mean() > 0.3


def test_unscored_tokens_stay_unscored():
    task = ControlTask([0.5, 0.5], seed=0)
    out = task(["a", "b", "c"], gold=np.array([1, -100, -1]))
    assert out[1] == -100 and out[2] == -1 and out[0] in (0, 1)


def test_label_distribution_of_train_tokens():
    p = label_distribution(np.array([0, 0, 1, 2, 0, -100, -1]), n_classes=4)
    assert np.allclose(p, [0.6, 0.2, 0.2, 0.0])
    with pytest.raises(LayerfuseError, match="no scored train labels"):
        label_distribution(np.array([-100, -100]), n_classes=2)
    with pytest.raises(LayerfuseError, match="label id 5"):
        label_distribution(np.array([5]), n_classes=3)
