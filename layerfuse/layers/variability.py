"""Training-free layer variability score (Xie et al., EMNLP 2022 Findings): lower = better layer.

For one layer with token features ``z`` and token classes ``y`` (C classes present, unweighted):

    mu_y    = mean of z over the tokens of class y
    mu      = (1/C) sum_y mu_y
    Sigma_w = (1/C) sum_y Cov(z | y)                       (population covariance, divide by n_y)
    Sigma_b = (1/C) sum_y (mu_y - mu)(mu_y - mu)^T = M^T M / C,   M = [mu_y - mu]  (C x d)
    nu      = (1/C) tr(Sigma_w Sigma_b^+)

Subspace trick: ``Sigma_b`` has rank r <= min(C - 1, d), so a d x d pseudo-inverse is both wasteful
and numerically poor (its null space is pure rounding noise). With the thin SVD ``M = P S U^T``,
``Sigma_b^+ = U diag(C / S^2) U^T`` over the r non-negligible singular values, hence

    tr(Sigma_w Sigma_b^+) = sum_i (u_i^T Sigma_w u_i) / s_i,   s_i = S_i^2 / C,
    u_i^T Sigma_w u_i     = (1/C) sum_y (1/n_y) ||(X_y - mu_y) u_i||^2,

computed from the centered class data projected on the r directions: no d x d matrix is formed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from layerfuse.errors import LayerfuseError

__all__ = ["layer_variability", "rank_layers", "pick_layers", "subsample_per_class"]


def subsample_per_class(
    labels: np.ndarray, *, max_per_class: int | None = 2000, seed: int = 0, ignore_label: int = -100
) -> np.ndarray:
    """Sorted indices of the kept tokens: ``ignore_label`` dropped, each class capped at
    ``max_per_class`` by a seeded random subsample (None = no cap), classes drawn in sorted order."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise LayerfuseError(f"labels must be 1-D [N], got shape {labels.shape}")
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise LayerfuseError(f"labels must be integers, got dtype {labels.dtype}")
    if max_per_class is not None and max_per_class < 1:
        raise LayerfuseError(f"max_per_class must be >= 1 or None, got {max_per_class}")
    keep = np.flatnonzero(labels != ignore_label)
    if max_per_class is None:
        return keep
    rng = np.random.default_rng(seed)
    parts = []
    for c in np.unique(labels[keep]):
        idx = keep[labels[keep] == c]
        if idx.size > max_per_class:
            idx = rng.choice(idx, size=max_per_class, replace=False)
        parts.append(idx)
    return np.sort(np.concatenate(parts)) if parts else keep


def _nu(x: np.ndarray, y: np.ndarray) -> float:
    """nu for already-selected float features ``x`` [n, d] and labels ``y`` [n] (see module doc)."""
    classes, inverse = np.unique(y, return_inverse=True)
    C = classes.size
    if C < 2:
        raise LayerfuseError(
            f"layer variability needs at least 2 classes, got {C} ({classes.tolist()}) in {y.size} tokens"
        )
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise LayerfuseError("features contain NaN or inf; cannot compute layer variability")
    scale = float(np.abs(x).max()) if x.size else 0.0
    x = x - x.mean(axis=0)  # global shift first: keeps class means small and accurate
    order = np.argsort(inverse, kind="stable")  # tokens grouped by class, for per-class sums
    x, inverse = x[order], inverse[order]
    counts = np.bincount(inverse, minlength=C)  # [C], all >= 1
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    counts = counts.astype(np.float64)
    means = np.add.reduceat(x, starts, axis=0) / counts[:, None]  # [C, d]
    M = means - means.mean(axis=0)  # [C, d]
    _, S, Ut = np.linalg.svd(M, full_matrices=False)  # S [min(C,d)], Ut [min(C,d), d]
    # Rounding in the class means is ~eps * |z|; singular values below that are not directions.
    ref = max(float(S[0]) if S.size else 0.0, np.sqrt(C * x.shape[1]) * scale)
    keep = S > max(C, x.shape[1]) * np.finfo(np.float64).eps * ref
    if not keep.any():
        return float("inf")  # class means coincide: the layer does not separate the classes at all
    S, U = S[keep], Ut[keep].T  # U [d, r]
    proj = (x - means[inverse]) @ U  # [n, r] centered class data on the between-class directions
    sq = np.add.reduceat(proj**2, starts, axis=0)  # [C, r]
    within = (sq / counts[:, None]).sum(axis=0) / C  # [r] u_i^T Sigma_w u_i
    s = S**2 / C  # [r] eigenvalues of Sigma_b
    return float((within / s).sum() / C)


def layer_variability(
    features: np.ndarray,
    labels: np.ndarray,
    *,
    max_per_class: int | None = 2000,
    seed: int = 0,
    ignore_label: int = -100,
) -> float:
    """nu = (1/C) tr(Sigma_w Sigma_b^+) for one layer's token ``features`` [N, d] and ``labels`` [N].

    Tokens labelled ``ignore_label`` are dropped; each class is capped at ``max_per_class`` tokens
    (seeded random subsample, None = no cap) so frequent tags do not dominate. Single-token classes
    add zero within-class covariance but count toward C. Returns inf when all class means coincide.
    """
    features = np.asarray(features)
    labels = np.asarray(labels)
    if features.ndim != 2:
        raise LayerfuseError(f"features must be 2-D [N, d], got shape {features.shape}")
    if labels.shape != features.shape[:1]:
        raise LayerfuseError(f"labels shape {labels.shape} does not match features shape {features.shape}")
    idx = subsample_per_class(labels, max_per_class=max_per_class, seed=seed, ignore_label=ignore_label)
    return _nu(features[idx], labels[idx])


def rank_layers(
    hidden: np.ndarray | Callable[[int], np.ndarray],
    labels: np.ndarray,
    *,
    layer_ids: list[int],
    max_per_class: int | None = 2000,
    seed: int = 0,
    ignore_label: int = -100,
    array_layers: list[int] | None = None,
) -> list[tuple[int, float]]:
    """``[(layer, nu), ...]`` in ``layer_ids`` order. ``hidden`` is a callable ``layer -> [N, d]``, or an
    array [N, K, d] whose column k holds layer ``array_layers[k]``: give them when the array holds other
    layers than 0..K-1 (``split.hidden(layers=[1, 2, 3])`` holds layers 1, 2, 3: ``array_layers=[1, 2, 3]``),
    or the scores are named by column, not by layer. The same token subsample is used for every layer."""
    labels = np.asarray(labels)
    if not layer_ids:
        raise LayerfuseError("layer_ids is empty; name at least one layer to rank")
    if not callable(hidden):
        hidden = np.asarray(hidden)
        if hidden.ndim != 3 or hidden.shape[0] != labels.shape[0]:
            raise LayerfuseError(
                f"hidden must be [N, L, d] with N = {labels.shape[0]} labels, got shape {hidden.shape}"
            )
        held = list(range(hidden.shape[1])) if array_layers is None else [int(x) for x in array_layers]
        if len(held) != hidden.shape[1]:
            raise LayerfuseError(f"array_layers names {len(held)} layers for an array of {hidden.shape[1]}")
        bad = [i for i in layer_ids if i not in held]  # the cache's ids: -1 was reported as -1
        if bad:
            raise LayerfuseError(f"layer_ids {bad} are not in the array (its layers: {held})")
        columns = {layer: k for k, layer in enumerate(held)}
    idx = subsample_per_class(labels, max_per_class=max_per_class, seed=seed, ignore_label=ignore_label)
    out = []
    for layer in layer_ids:
        if callable(hidden):
            z = np.asarray(hidden(layer))
            if z.ndim != 2 or z.shape[0] != labels.shape[0]:
                raise LayerfuseError(
                    f"layer {layer}: expected features [N={labels.shape[0]}, d], got shape {z.shape}"
                )
            z = z[idx]
        else:
            z = hidden[idx, columns[layer]]
        out.append((int(layer), _nu(z, labels[idx])))
    return out


def pick_layers(scores: list[tuple[int, float]], k: int) -> list[int]:
    """The ``k`` layers with the lowest nu (ties: lower layer first), sorted by layer index."""
    if not 1 <= k <= len(scores):
        raise LayerfuseError(f"k = {k} is out of range: need 1 <= k <= {len(scores)} (number of layers scored)")
    best = sorted(scores, key=lambda t: (t[1], t[0]))[:k]
    return sorted(layer for layer, _ in best)
