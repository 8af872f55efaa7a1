import numpy as np
import pytest

from layerfuse.errors import LayerfuseError
from layerfuse.layers.variability import layer_variability, pick_layers, rank_layers, subsample_per_class


def reference_nu(z, y):
    """Direct transcription of nu = (1/C) tr(Sigma_w pinv(Sigma_b)) with explicit d x d matrices."""
    classes = np.unique(y)
    C, d = len(classes), z.shape[1]
    mus = np.stack([z[y == c].mean(0) for c in classes])
    sw = sum(np.cov(z[y == c], rowvar=False, bias=True).reshape(d, d) if (y == c).sum() > 1 else np.zeros((d, d))
             for c in classes) / C
    mu = mus.mean(0)
    sb = sum(np.outer(m - mu, m - mu) for m in mus) / C
    return np.trace(sw @ np.linalg.pinv(sb, rcond=1e-10)) / C


def make(n, d, c, seed=0, offset=0.0):
    rng = np.random.default_rng(seed)
    y = np.concatenate([np.arange(c), rng.integers(0, c, n - c)])  # every class present
    z = rng.normal(size=(n, d)) + rng.normal(size=(c, d))[y] + offset
    return z, y


@pytest.mark.parametrize("n,d,c", [(200, 8, 3), (30, 50, 4), (60, 3, 8), (500, 16, 10), (12, 5, 2)])
def test_matches_reference(n, d, c):
    z, y = make(n, d, c, seed=n + d + c)
    assert layer_variability(z, y, max_per_class=None) == pytest.approx(reference_nu(z, y), rel=1e-8)


def test_large_offset_and_singleton_class():
    z, y = make(100, 6, 4, seed=1, offset=1e4)
    y[0] = 7  # a class with a single token: zero within-class covariance, still counted in C
    assert layer_variability(z, y, max_per_class=None) == pytest.approx(reference_nu(z, y), rel=1e-6)


def test_separating_layer_scores_lower():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 400)
    sep = 10 * rng.normal(size=(5, 32))[y] + 0.1 * rng.normal(size=(400, 32))
    noise = rng.normal(size=(400, 32))
    hidden = np.stack([noise, sep], axis=1)  # [N, L=2, d]
    (l0, nu_noise), (l1, nu_sep) = rank_layers(hidden, y, layer_ids=[0, 1])
    assert (l0, l1) == (0, 1)
    assert nu_sep < 1e-3 * nu_noise
    assert rank_layers(lambda i: hidden[:, i], y, layer_ids=[0, 1]) == [(0, nu_noise), (1, nu_sep)]
    assert pick_layers([(0, nu_noise), (1, nu_sep)], 1) == [1]


def test_invariant_to_scale_and_rotation():
    z, y = make(150, 10, 4, seed=3)
    nu = layer_variability(z, y)
    q, _ = np.linalg.qr(np.random.default_rng(4).normal(size=(10, 10)))
    assert layer_variability(37.5 * z, y) == pytest.approx(nu, rel=1e-9)
    assert layer_variability(z @ q, y) == pytest.approx(nu, rel=1e-9)


def test_class_cap_deterministic_and_respected():
    rng = np.random.default_rng(5)
    y = np.concatenate([np.zeros(500, int), np.ones(40, int), np.full(3, 2), np.full(10, -100)])
    rng.shuffle(y)
    z = rng.normal(size=(y.size, 6)) + y[:, None]
    idx = subsample_per_class(y, max_per_class=50, seed=1)
    assert np.array_equal(idx, subsample_per_class(y, max_per_class=50, seed=1))
    assert not np.array_equal(idx, subsample_per_class(y, max_per_class=50, seed=2))
    assert np.bincount(y[idx]).tolist() == [50, 40, 3]  # ignore_label dropped, small classes kept whole
    assert np.all(np.diff(idx) > 0)
    nu = layer_variability(z, y, max_per_class=50, seed=1)
    assert nu == layer_variability(z, y, max_per_class=50, seed=1)
    assert nu == pytest.approx(layer_variability(z[idx], y[idx], max_per_class=None), rel=1e-12)
    assert nu != layer_variability(z, y, max_per_class=50, seed=2)


def test_errors_and_degenerate():
    z = np.random.default_rng(0).normal(size=(10, 4))
    with pytest.raises(LayerfuseError, match="at least 2 classes"):
        layer_variability(z, np.zeros(10, int))
    with pytest.raises(LayerfuseError, match="at least 2 classes"):
        layer_variability(z, np.array([0] * 5 + [-100] * 5))
    with pytest.raises(LayerfuseError, match="shape"):
        layer_variability(z, np.zeros(9, int))
    with pytest.raises(LayerfuseError, match="max_per_class"):
        layer_variability(z, np.arange(10) % 2, max_per_class=0)
    with pytest.raises(LayerfuseError, match=r"\[5\]"):
        rank_layers(z.reshape(10, 1, 4), np.arange(10) % 2, layer_ids=[0, 5])
    const = np.full((10, 4), 0.1)  # identical class means: no between-class direction
    assert layer_variability(const, np.arange(10) % 2) == float("inf")


def test_pick_layers():
    scores = [(0, 3.0), (1, 0.5), (2, 2.0), (3, 0.1), (4, 0.5)]
    assert pick_layers(scores, 1) == [3]
    assert pick_layers(scores, 3) == [1, 3, 4]
    assert pick_layers(scores, 5) == [0, 1, 2, 3, 4]
    assert pick_layers([(12, 1.0), (6, float("inf")), (9, 0.2)], 2) == [9, 12]
    for k in (0, 6, -1):
        with pytest.raises(LayerfuseError, match=f"k = {k}.*5"):
            pick_layers(scores, k)


def test_a_negative_layer_id_is_refused():
    """rank_layers(layer_ids=[-1]) scored the last layer and reported it as layer -1."""
    hidden, labels = np.random.default_rng(0).normal(size=(40, 3, 4)), np.arange(40) % 2
    with pytest.raises(LayerfuseError, match=r"layer_ids \[-1\] are not in the array \(its layers: \[0, 1, 2\]\)"):
        rank_layers(hidden, labels, layer_ids=[-1])


def test_an_array_of_some_layers_is_scored_by_layer_not_by_column():
    """split.hidden(layers=[1, 2, 3]) holds layers 1 to 3 in columns 0 to 2: with ``array_layers`` the
    scores are named by layer, as the callable form names them (by column they named layer 2 "1")."""
    rng = np.random.default_rng(0)
    every, labels = rng.normal(size=(60, 4, 5)), np.arange(60) % 3
    some = every[:, 1:]
    by_callable = rank_layers(lambda layer: every[:, layer], labels, layer_ids=[1, 2, 3])
    assert rank_layers(some, labels, layer_ids=[1, 2, 3], array_layers=[1, 2, 3]) == by_callable
    assert rank_layers(every, labels, layer_ids=[1, 2, 3]) == by_callable  # columns are layers 0..3
    with pytest.raises(LayerfuseError, match="array_layers names 2 layers for an array of 3"):
        rank_layers(some, labels, layer_ids=[1], array_layers=[1, 2])
