"""Few-shot samples: N * C sentences, uniform, without replacement, fixed by the seed."""

import numpy as np
import pytest

from layerfuse.errors import LayerfuseError
from layerfuse.training.sampling import few_shot_sample


def test_deterministic_per_seed():
    a = few_shot_sample(1000, shots=8, n_types=4, seed=3)
    b = few_shot_sample(1000, shots=8, n_types=4, seed=3)
    c = few_shot_sample(1000, shots=8, n_types=4, seed=4)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_exactly_n_times_c_distinct_ids_in_range():
    for shots, n_types, n in [(1, 4, 4), (8, 4, 1000), (128, 4, 14041), (5, 3, 15)]:
        ids = few_shot_sample(n, shots=shots, n_types=n_types, seed=0)
        assert ids.dtype == np.int64
        assert len(ids) == shots * n_types
        assert len(np.unique(ids)) == len(ids)
        assert ids.min() >= 0 and ids.max() < n


def test_is_the_documented_draw():
    """The protocol: numpy's default_rng(seed).choice without replacement, nothing stratified."""
    expected = np.random.default_rng(7).choice(500, size=24, replace=False)
    assert np.array_equal(few_shot_sample(500, shots=8, n_types=3, seed=7), expected)


def test_uniform_over_sentences():
    counts = np.zeros(20)
    for seed in range(2000):
        counts[few_shot_sample(20, shots=5, n_types=1, seed=seed)] += 1
    assert np.all(np.abs(counts - 500) < 80)  # expected 2000 * 5 / 20 = 500 each; sd ~ 19


def test_all_means_every_sentence_in_order():
    for shots in (None, "all"):
        assert np.array_equal(few_shot_sample(7, shots=shots, n_types=4, seed=1), np.arange(7))


def test_too_large_names_both_numbers():
    with pytest.raises(LayerfuseError, match=r"150.*100"):
        few_shot_sample(100, shots=50, n_types=3, seed=0)


@pytest.mark.parametrize("shots", [0, -1, 2.5, "8", True])
def test_bad_shots(shots):
    with pytest.raises(LayerfuseError, match="shots"):
        few_shot_sample(100, shots=shots, n_types=4, seed=0)
