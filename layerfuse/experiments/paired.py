"""Heads against one head, paired by seed.

The runs of one seed draw one few-shot sample whatever their head, so the per-seed difference of two
heads' scores cancels the sample's luck: its spread is the heads', not the samples'. A seed counts
only where both runs drew the same sample (their ``sample_fingerprint``) and both have the score.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np


def ci95(values) -> tuple[float, float]:
    """(mean, half-width of the 95% CI of the mean); the half-width is 0 for a single value."""
    from scipy.stats import t

    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), 0.0
    return float(x.mean()), float(t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


def paired_diffs(a: dict, b: dict, *, key: str, scale: float = 100.0) -> list[float]:
    """The per-seed differences a − b x ``scale``, in seed order, over the seeds of ``a`` and ``b``
    ({seed: record}) that both ran on the same sample and both have ``key``."""
    return [scale * (a[seed][key] - b[seed][key]) for seed in sorted(set(a) & set(b))
            if a[seed].get("sample_fingerprint") == b[seed].get("sample_fingerprint")
            and a[seed].get(key) is not None and b[seed].get(key) is not None]


def ci_cell(values: list[float], *, signed: bool = False) -> str:
    """'mean ± half-width of its 95% CI (n)' (Student t, n − 1 degrees of freedom); '-' for none."""
    if not values:
        return "-"
    mean, half = ci95(values)
    mean = round(mean, 1) or 0.0  # a mean that rounds to zero is 0.0, never "-0.0"
    return f"{mean:{'+' if signed else ''}.1f} ± {half:.1f} ({len(values)})"


def against_zero(values: list[float]) -> str:
    """Whether the 95% CI of the mean of ``values`` lies above 0, below 0, or contains it ('inside');
    with fewer than 2 values there is no interval, and no verdict: '-' (it said 'inside' beside '± 0.0')."""
    if len(values) < 2:
        return "-"
    mean, half = ci95(values)
    return "inside" if abs(mean) <= half else ("above 0" if mean > 0 else "below 0")


def _by_seed(runs: list[dict]) -> dict[int, dict]:
    """{seed: record} of a cell's runs; a seed with two runs in one cell pairs with nothing."""
    found = defaultdict(list)
    for r in runs:
        found[r["config"]["seed"]].append(r)
    return {seed: rs[0] for seed, rs in found.items() if len(rs) == 1}


def paired_table(best: dict[tuple, list[dict]], m, against: str = "base",
                 base_of: dict[str, str] | None = None) -> str | None:
    """Markdown, one row per other head and (N, epoch cap) that shares seeds with ``against``, from
    ``best`` ({(head, N, epochs): runs}, each cell at its best learning rate, as the report's table
    reads them) and ``m``, the records' `report.Metric`: the per-seed difference head − ``against`` of
    the best dev score and of the test score at the best dev point, mean ± 95% CI (pairs); whether the
    dev interval lies above 0, below it or contains it; and in how many seeds the head scored higher.
    ``base_of``: each head's ``against`` row when rows are named apart by other settings ("concat (mode
    ft)" pairs with "base (mode ft)"). None when no head pairs with ``against``."""
    rows = []
    for (head, shots, epochs), runs in sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][1] or 10**9, kv[0][2])):
        base = (base_of or {}).get(head, against)
        other = best.get((base, shots, epochs))
        if head == base or not other:
            continue
        a, b = _by_seed(runs), _by_seed(other)
        dev = paired_diffs(a, b, key=m.dev, scale=m.scale)
        if not dev:
            continue
        test = paired_diffs(a, b, key=m.test, scale=m.scale)
        rows.append(f"| {head} | {shots or 'all'} | {epochs} | {ci_cell(dev, signed=True)} | {against_zero(dev)} | "
                    f"{sum(d > 0 for d in dev)} of {len(dev)} | {ci_cell(test, signed=True)} |")
    if not rows:
        return None
    return "\n".join([f"| head | N | epochs | dev {m.name} − {against} | against 0 | seeds above {against} | "
                      f"test {m.name} − {against} |", "|---|---:|---:|---:|---|---:|---:|", *rows])
