"""Figure 7 in the paper's terms: each head's change in F1 from the shallower backbone to the deeper
one (all-MiniLM-L6-v2, 6 x 384, to all-mpnet-base-v2, 12 x 768), read from the committed table of
scripts/depth_study_conll.py (no training).

For every protocol, head and N present on both backbones: the change of the mean dev F1 (and test
F1) from the first backbone to the second, with an unpaired 95% CI (Welch) rebuilt from each cell's
mean ± 95% CI half-width and its number of seeds, as the table prints them (rounded to 0.1). The
runs of one seed saw the same sample on both backbones, so a paired interval would be narrower; the
per-run results of the depth study are not committed, so it is not computed. The two backbones
differ in width and pretraining as well as in depth: a change is not depth's alone.

    python scripts/depth_change_conll.py      # reads docs/results/depth_study_conll.md, writes depth_change_conll.md
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

from _common import results_path, write_results

ROW = re.compile(r"^\| (?P<model>[^|(]+?) \(L=(?P<layers>\d+)\) \| (?P<protocol>[^|]+?) \| (?P<head>[^|]+?) "
                 r"\| (?P<n>\d+) \| (?P<dev>-?[\d.]+) ± (?P<dev_half>[\d.]+) \((?P<seeds>\d+)\) "
                 r"\| (?P<test>-?[\d.]+) ± (?P<test_half>[\d.]+) \|", re.M)


def cells(text: str) -> dict:
    """(model, L) -> {(protocol, head, N): (dev, dev half, test, test half, seeds)} from the first table."""
    out: dict = {}
    for m in ROW.finditer(text.split("\n\nLayers picked", 1)[0]):
        out.setdefault((m["model"].strip(), int(m["layers"])), {})[m["protocol"], m["head"], int(m["n"])] = (
            float(m["dev"]), float(m["dev_half"]), float(m["test"]), float(m["test_half"]), int(m["seeds"]))
    return out


def welch(mean_a: float, half_a: float, n_a: int, mean_b: float, half_b: float, n_b: int) -> tuple[float, float]:
    """(b − a, 95% CI half-width of it) from two means with their 95% t-interval half-widths."""
    from scipy.stats import t

    se_a, se_b = half_a / t.ppf(0.975, n_a - 1), half_b / t.ppf(0.975, n_b - 1)
    var = se_a ** 2 + se_b ** 2
    if var == 0:
        return mean_b - mean_a, 0.0
    df = var ** 2 / (se_a ** 4 / (n_a - 1) + se_b ** 4 / (n_b - 1))
    return mean_b - mean_a, float(t.ppf(0.975, df) * math.sqrt(var))


def table(by_model: dict) -> str:
    (small, small_l), (large, large_l) = sorted(by_model, key=lambda k: k[1])[:2]
    a, b = by_model[small, small_l], by_model[large, large_l]
    lines = [f"Change from {small} (L={small_l}) to {large} (L={large_l}): the second backbone's mean minus "
             "the first's, with an unpaired (Welch) 95% CI; 'against 0': whether that interval lies above 0, "
             "below 0, or contains it ('inside').", "",
             "| protocol | head | N | dev F1 on the first | dev F1 on the second | change (dev) | against 0 "
             "| change (test) |", "|---|---|---:|---:|---:|---:|---|---:|"]
    for key in sorted(set(a) & set(b)):
        protocol, head, n = key
        da, ha, ta, tha, sa = a[key]
        db, hb, tb, thb, sb = b[key]
        change, half = welch(da, ha, sa, db, hb, sb)
        tchange, thalf = welch(ta, tha, sa, tb, thb, sb)
        verdict = "inside" if abs(change) <= half else ("above 0" if change > 0 else "below 0")
        lines.append(f"| {protocol} | {head} | {n} | {da:.1f} ± {ha:.1f} | {db:.1f} ± {hb:.1f} "
                     f"| {change:+.1f} ± {half:.1f} | {verdict} | {tchange:+.1f} ± {thalf:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", default=results_path("depth_study_conll"), help="the depth study's table")
    p.add_argument("--table", default=results_path("depth_change_conll"))
    args = p.parse_args(argv)
    study = Path(args.study).read_text(encoding="utf-8")
    by_model = cells(study)
    if len(by_model) < 2:
        raise SystemExit(f"{args.study}: fewer than two backbones in its table")
    dev = re.search(r"^Dev: (.*)\.$", study, re.M)
    text = (f"Read from `{Path(args.study).name}` (its runs: bf16 autocast, 25 epochs, seeds as its table "
            "says); nothing is trained here. The backbones differ in width and pretraining as well as in "
            "depth.\n\n" + table(by_model))
    write_results(args.table, text, title="Each head's change from the shallower backbone to the deeper "
                  "(paper Figure 7's measure)", script="depth_change_conll", argv=argv,
                  dev=dev[1] if dev else None,
                  machine=f"arithmetic on `{Path(args.study).name}`, whose runs ran on the machine it names")
    print(text)
    return text


if __name__ == "__main__":
    main()
