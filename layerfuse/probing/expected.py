"""Where in the network a task is resolved: two expected layers (Tenney et al. 2019, section 3).

- `center_of_gravity`: of the ScalarMix weights, E[l] = sum_l l * softmax(w)_l, over layers 0..L.
- `expected_layer`: from single-layer scores s_0..s_L, E[l] = sum_l l * delta_l / sum_l delta_l with
  delta_l = max(0, s_l - s_{l-1}) for l = 1..L. Tenney's "expected layer" takes the deltas of
  *cumulative* probes (layers 0..l mixed), which only gain as l grows; this is its single-layer
  analogue: the gain of each layer over the one below, where a loss counts as no gain, so a layer
  that forgets what the one below knew does not pull the expectation down.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import LayerfuseError


def center_of_gravity(weights: Sequence[float]) -> float:
    """sum_l l * w_l of the mixing weights w over layers 0..L (normalised here if they do not sum to 1)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or (w < 0).any() or w.sum() <= 0:
        raise LayerfuseError(f"mixing weights must be non-negative and not all 0, got {list(weights)}")
    return float((np.arange(w.size) * w).sum() / w.sum())


def layer_deltas(scores: Sequence[float]) -> np.ndarray:
    """[L + 1]: delta_0 = 0, delta_l = max(0, s_l - s_{l-1})."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or not np.isfinite(s).all():
        raise LayerfuseError(f"layer scores must be finite numbers, one per layer 0..L, got {list(scores)}")
    return np.concatenate([[0.0], np.maximum(0.0, np.diff(s))])


def expected_layer(scores: Sequence[float]) -> float | None:
    """sum_l l * delta_l / sum_l delta_l for single-layer scores s_0..s_L; None when no layer gains
    on the one below (nothing to weigh)."""
    delta = layer_deltas(scores)
    if delta.sum() <= 0:
        return None
    return float((np.arange(delta.size) * delta).sum() / delta.sum())
