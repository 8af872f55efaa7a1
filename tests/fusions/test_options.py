"""A fusion owns its settings (`Fusion.options`) and its FE rate (`Fusion.fe_lr`): run ids, grids,
report rows and defaults read them from its class, so no other module spells its name."""

from __future__ import annotations

from layerfuse.experiments.report import label
from layerfuse.experiments.results import run_id
from layerfuse.experiments.runner import grid
from layerfuse.fusions.registry import FUSIONS, owned_options
from layerfuse.training import TrainConfig
from layerfuse.training.config import default_lr

BASE = TrainConfig(fusion="concat", shots=4, epochs=2, seed=0)


def test_owned_settings_come_from_the_classes():
    assert owned_options() == {"layer_score": {"dwatt"}, "extra_layers": {"extra"}}


def test_a_setting_enters_only_its_owners_run_ids():
    assert run_id({**BASE.record(), "extra_layers": 2}) == run_id(BASE.record())  # concat reads no extra_layers
    extra = {**BASE.record(), "fusion": "extra"}
    assert run_id({**extra, "extra_layers": 2}) != run_id(extra)


def test_a_grid_varies_a_setting_for_its_owners_alone():
    configs = grid(fusions=["concat", "dwatt", "extra"], shots=[4], epochs=[2], trials=1, base=BASE,
                   layer_score=["paper", "scaled"], extra_layers=[1, 2])
    by_fusion = {f: sorted((c.layer_score, c.extra_layers or 0) for c in configs if c.fusion == f) for f in FUSIONS}
    assert by_fusion["concat"] == [(BASE.layer_score, 0)]
    assert by_fusion["dwatt"] == [("paper", 0), ("scaled", 0)]
    assert by_fusion["extra"] == [(BASE.layer_score, 1), (BASE.layer_score, 2)]


def test_a_report_row_names_the_fusions_own_settings_away_from_default():
    assert label({"fusion": "dwatt"}) == "dwatt (paper)"  # records from before the option: the paper's score
    assert label({"fusion": "dwatt", "layer_score": "scaled"}) == "dwatt"
    assert label({"fusion": "extra", "extra_layers": 2}) == "extra (extra layers 2)"
    assert label({"fusion": "concat", "extra_layers": 2, "layer_score": "paper"}) == "concat"


def test_a_fusions_fe_rate_is_its_own(monkeypatch):
    assert default_lr("base") == FUSIONS["base"].fe_lr == 1e-2
    assert default_lr("concat") == FUSIONS["concat"].fe_lr == 1e-3
    monkeypatch.setattr(FUSIONS["concat"], "fe_lr", 3e-3)
    assert default_lr("concat") == 3e-3 and default_lr("concat", "ft") == 5e-5
