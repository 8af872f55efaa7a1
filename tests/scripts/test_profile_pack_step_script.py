"""scripts/profile_pack_step.py on a CPU at MiniLM shape: a row per variant, the phases of the
cell's step, and batches of real CoNLL-2003 sentence lengths when the data is there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CONLL = Path(__file__).resolve().parents[3] / "shared" / "data" / "conll2003"


def _rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("|")[1:-1]] for line in text.splitlines() if line.startswith("| concat")]


def test_profile_pack_step_times_each_variant_and_phase(load_script, tmp_path):
    report = tmp_path / "profile.md"
    text = load_script("profile_pack_step").main(["--shape", "minilm", "--device", "cpu", "--fusions", "concat",
                                                  "--k", "2", "--steps", "1", "--rows", "3",
                                                  "--report", str(report)])
    rows = _rows(text)
    narrow, autograd = "narrow, widened", "float32"  # a CPU's way is float32 (`packed.NARROW_GRADS`)
    assert [tuple(r[1:5]) for r in rows] == [("2", "4", "yes", autograd), ("2", "4", "yes", narrow),
                                             ("2", "1", "yes", autograd), ("2", "4", "no", autograd),
                                             ("5", "1", "yes", autograd), ("1", "1", "yes", autograd)]
    from layerfuse.training.packed import NARROW_GRADS

    assert "cpu" not in NARROW_GRADS  # the script puts the library's way back
    assert all(float(r[5]) > 0 and float(r[6]) == pytest.approx(float(r[5]) / int(r[1]), abs=0.01) for r in rows)
    phases = re.search(r"Phases, ms \(median, each closed by a device sync\): (.*)\.", text).group(1)
    assert [p.split()[0] for p in phases.split(", ")] == ["zero_grad", "cast", "forward", "loss", "backward", "clip",
                                                          "adamw"]
    assert "Made by `python scripts/profile_pack_step.py" in report.read_text()


@pytest.mark.skipif(not CONLL.is_dir(), reason="needs the CoNLL-2003 data in ../shared/data/conll2003")
def test_profile_pack_step_draws_conll_lengths(load_script):
    script = load_script("profile_pack_step")
    lengths = script.batch_lengths(str(CONLL), 3)
    assert len(lengths) == 3 and all(len(ls) == 16 and ls.min() >= 1 for ls in lengths)
    assert not all((lengths[0] == ls).all() for ls in lengths[1:])  # each head its own sentences
    assert [ls.tolist() for ls in script.batch_lengths(str(CONLL), 3)] == [ls.tolist() for ls in lengths]
