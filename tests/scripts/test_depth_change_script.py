"""scripts/depth_change_conll.py: each head's change from the shallower backbone to the deeper, read
from a depth-study table, with a Welch interval rebuilt from the cells' mean ± 95% CI (seeds)."""

from __future__ import annotations

import pytest

TABLE = """# Depth study (paper Figure 7)

Made by `python scripts/depth_study_conll.py`.

Machine: somewhere.

Dev: all 40 dev sentences.

| backbone | protocol | head | N | dev F1 | test F1 | gain over base (dev) |
|---|---|---|---:|---:|---:|---:|
| small (L=2) | layerfuse | concat | 8 | 40.0 ± 4.3 (3) | 38.0 ± 4.3 | 1.0 ± 1.0 |
| small (L=2) | layerfuse | extra | 8 | 30.0 ± 0.0 (3) | 29.0 ± 0.0 | - |
| big (L=4) | layerfuse | concat | 8 | 50.0 ± 4.3 (3) | 48.0 ± 4.3 | 2.0 ± 1.0 |
| big (L=4) | layerfuse | extra | 8 | 30.5 ± 0.0 (3) | 29.0 ± 0.0 | - |
| big (L=4) | paper | concat | 8 | 10.0 ± 1.0 (3) | 9.0 ± 1.0 | - |

Layers picked by variability (auto:1) against the top 1, layerfuse protocol:

| backbone | head | N | layers | dev F1 | test F1 | layers fused (per seed) |
|---|---|---:|---|---:|---:|---|
| small | concat | 8 | auto:1 | 1.0 ± 1.0 | 1.0 ± 1.0 | 1 / 1 / 1 |
"""


def test_changes_from_the_table(tmp_path, load_script):
    script = load_script("depth_change_conll")
    study = tmp_path / "depth.md"
    study.write_text(TABLE, encoding="utf-8")
    out = tmp_path / "change.md"
    text = script.main(["--study", str(study), "--table", str(out)])
    rows = {tuple(c.strip() for c in line.split("|")[1:4]): [c.strip() for c in line.split("|")[1:-1]]
            for line in text.splitlines() if line.startswith("| layerfuse") or line.startswith("| paper")}
    assert set(rows) == {("layerfuse", "concat", "8"), ("layerfuse", "extra", "8")}  # paper: one backbone only
    concat = rows["layerfuse", "concat", "8"]
    # two cells of half-width 4.3 over 3 seeds: se = 4.3 / t(2) each; Welch df = 4
    from scipy.stats import t
    se = 4.3 / t.ppf(0.975, 2)
    assert concat[5] == f"+10.0 ± {t.ppf(0.975, 4) * se * 2 ** 0.5:.1f}" and concat[6] == "above 0"
    assert rows["layerfuse", "extra", "8"][5] == "+0.5 ± 0.0"
    assert "Change from small (L=2) to big (L=4)" in text
    assert "\n\nDev: all 40 dev sentences.\n\n" in out.read_text()


def test_welch_is_symmetric(load_script):
    script = load_script("depth_change_conll")
    assert script.welch(1.0, 2.0, 3, 3.0, 1.0, 5)[1] == pytest.approx(script.welch(3.0, 1.0, 5, 1.0, 2.0, 3)[1])
