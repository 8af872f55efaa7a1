"""A sweep's report says what its dev scores were measured on: the whole split or the fixed subset."""

from __future__ import annotations

from layerfuse.experiments.report import dev_note, render


def _record(fusion, seed, dev_sentences):
    return {"config": {"fusion": fusion, "shots": 8, "epochs": 5, "seed": seed, "lr": 1e-3,
                       "dev_sentences": dev_sentences},
            "best_dev_f1": 0.5, "test_f1_at_best": 0.4, "model": "m", "dataset": "d",
            "evals": [{"step": 1, "dev_f1": 0.5}], "seconds": {"total": 1.0}}


def test_the_report_names_the_dev_subset(tmp_path):
    render([_record("concat", s, 1000) for s in range(2)], str(tmp_path))
    text = (tmp_path / "report.md").read_text()
    assert "\n\nDev: a fixed random subset of 1,000 dev sentences, the same in every run " \
           "(`--dev-sentences 1000`).\n\n" in text


def test_whole_dev_and_mixed_sweeps():
    assert dev_note([_record("concat", 0, None)]) == "Dev: the whole dev split."
    mixed = dev_note([_record("concat", 0, None), _record("dwatt", 0, 500), _record("dwatt", 1, 500)])
    assert mixed.startswith("Dev: 1 runs on the whole dev split; 2 runs on a fixed random subset of 500 dev sentences")


def test_runs_that_read_the_top_layer_as_z_l_get_their_own_rows():
    from layerfuse.experiments.report import label

    assert label({"fusion": "dwatt", "layer_score": "scaled"}) == "dwatt"
    assert label({"fusion": "dwatt", "layer_score": "scaled", "query_layer": "top"}) == "dwatt (z_L top)"
    assert label({"fusion": "dwatt", "layer_score": "paper", "query_layer": "top"}) == "dwatt (paper, z_L top)"
    assert label({"fusion": "base", "query_layer": "top"}) == "base (z_L top)"
    assert label({"fusion": "concat", "query_layer": "top"}) == "concat"  # no z_L: the same head either way
