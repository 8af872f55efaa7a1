"""A sweep's report says what its dev scores were measured on: the whole split or the fixed subset."""

from __future__ import annotations

import pytest

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


def test_runs_of_other_settings_in_one_results_file_are_other_rows(tmp_path):
    """Two sweeps into one --out (other --layers, other --dev-sentences): `sweep --report` renders
    them as rows of their own, never one row averaging both; one sweep's rows keep the fusion's name."""
    from layerfuse.experiments.report import table

    def run(seed, layers, dev_sentences, f1):
        record = _record("concat", seed, dev_sentences)
        record["config"]["layers"] = layers
        record["best_dev_f1"] = f1
        return record

    alone = table([run(s, None, None, 0.5) for s in range(2)])
    assert "| concat | 8 | 5 |" in alone
    both = table([run(s, None, None, 0.5) for s in range(2)] + [run(s, "auto:3", 500, 0.7) for s in range(2)])
    assert "| concat (dev sentences all, layers all) | 8 | 5 | 0.001 | 50.0 ± 0.0 (2) |" in both
    assert "| concat (dev sentences 500, layers auto:3) | 8 | 5 | 0.001 | 70.0 ± 0.0 (2) |" in both


def test_layer_shares_are_averaged_by_layer_when_runs_fused_other_layers():
    """`--layers auto:2` picks per run: one run fused layers 1 and 3, the other 2 and 3; the heat map's
    shares are per layer (0 where a run did not fuse it), not by position in each run's list."""
    from layerfuse.experiments.report import usage_by_label

    runs = [_record("concat", 0, None), _record("concat", 1, None)]
    runs[0]["layer_usage"] = {"layers": [1, 3], "share": [0.2, 0.8]}
    runs[1]["layer_usage"] = {"layers": [2, 3], "share": [0.6, 0.4]}
    layers, share = usage_by_label(runs)["concat"]
    assert layers == [1, 2, 3]
    assert share.tolist() == pytest.approx([0.1, 0.3, 0.6])


def test_a_dollar_in_a_model_or_dataset_name_is_text_in_every_figure(tmp_path):
    """Two ``$`` in a name (a folder named ``cost $_$ data``) made matplotlib read TeX and raise, after the runs,
    on every --report; a pair was drawn as maths. Both are drawn as written."""
    from layerfuse.experiments.plots import plot_scores

    records = [{**_record("concat", s, None), "dataset": "cost $_$ data"} for s in range(2)]
    paths = render(records, str(tmp_path))
    assert paths and all((tmp_path / name).is_file() for name in ("report.md", "f1_vs_shots.png"))
    assert plot_scores([(1, 1.0), (2, 2.0)], title="cost $_$ data", path=str(tmp_path / "s.png"))
