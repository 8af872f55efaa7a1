"""The report's heads against base, paired by seed: the per-seed differences, only where both runs
drew the same sample, each cell at its best learning rate, each head against the base of its own
settings; the section stays out of Figure 3's table. And what a report refuses or names: runs of two
cache entries, step curves at an N no run has, a label set other than NER."""

from __future__ import annotations

import pytest

from layerfuse.experiments import report
from layerfuse.experiments.paired import against_zero, paired_table


def _record(fusion, seed, f1, *, lr=1e-3, sample="s", shots=8):
    return {"run_id": f"{fusion}-{shots}-{seed}-{lr}", "sample_fingerprint": f"{sample}{seed}",
            "config": {"fusion": fusion, "shots": shots, "epochs": 10, "seed": seed, "lr": lr},
            "best_dev_f1": f1, "test_f1_at_best": f1 - 0.1, "model": "m", "dataset": "d",
            "evals": [{"step": 1, "dev_f1": f1}], "seconds": {"total": 1.0}}


def _table(records):
    return paired_table(report.cells(records), report.metric_of(records))


def test_differences_are_per_seed_and_say_where_their_interval_lies():
    base = [_record("base", s, f1) for s, f1 in enumerate([0.50, 0.30, 0.40])]
    concat = [_record("concat", s, f1) for s, f1 in enumerate([0.55, 0.36, 0.44])]  # +5, +6, +4 per seed
    rows = _table(base + concat).splitlines()
    assert rows[0].startswith("| head | N | epochs | dev F1 − base | against 0 | seeds above base |")
    # the unpaired means differ by +5.0 too, but their trial spread (sd 10) would swallow it; the pairs' does not
    assert rows[2] == "| concat | 8 | 10 | +5.0 ± 2.5 (3) | above 0 | 3 of 3 | +5.0 ± 2.5 (3) |"
    assert len(rows) == 3  # base is not set against itself


def test_a_seed_whose_samples_differ_pairs_with_nothing():
    base = [_record("base", s, 0.5) for s in range(3)]
    concat = [_record("concat", s, 0.6, sample="other" if s == 2 else "s") for s in range(3)]
    assert "| +10.0 ± 0.0 (2) | above 0 | 2 of 2 |" in _table(base + concat)
    assert _table([_record("concat", s, 0.6) for s in range(3)]) is None  # no base: no table


def test_each_cell_pairs_at_its_best_rate():
    base = [_record("base", s, 0.5, lr=lr) for s in range(3) for lr in (1e-3, 1e-2)]
    concat = ([_record("concat", s, 0.4, lr=1e-3) for s in range(3)]
              + [_record("concat", s, 0.7 + s / 100, lr=1e-2) for s in range(3)])
    assert "| concat | 8 | 10 | +21.0 ± 2.5 (3) |" in _table(base + concat)


def test_against_zero_needs_two_values():
    assert against_zero([3.0]) == "-"  # it said "inside" beside "+3.0 ± 0.0 (1)", an interval that excludes 0
    assert against_zero([-3.0, -4.0, -5.0]) == "below 0"


def test_the_report_has_the_section_and_figure_3_reads_only_its_first_table(tmp_path):
    records = [_record(f, s, 0.5 + (f == "concat") * 0.05 + s / 100) for f in ("base", "concat") for s in range(3)]
    text = open(report.render(records, str(tmp_path))["table"], encoding="utf-8").read()
    assert "## Each head against base, paired by seed" in text and "| concat | 8 | 10 | +5.0 ± 0.0 (3) |" in text
    assert set(report.stats_from_table(text)) == {("base", 8, 10), ("concat", 8, 10)}
    assert report.stats_from_table(text)[("concat", 8, 10)] == pytest.approx((56.0, 2.5), abs=0.05)


def test_rows_named_apart_by_a_setting_pair_with_the_base_of_that_setting(tmp_path):
    """FE and FT runs in one file (or two --dev-sentences): every row is named by its mode, and each head
    pairs with the base of its own mode (the section went missing: it looked for a row named "base")."""
    records = [dict(r, run_id=f"{r['run_id']}-{mode}", config={**r["config"], "mode": mode})
               for mode, gain in (("fe", 0.05), ("ft", 0.10))
               for r in [_record(f, s, 0.5 + (f == "concat") * gain + s / 100) for f in ("base", "concat")
                         for s in range(3)]]
    text = open(report.render(records, str(tmp_path))["table"], encoding="utf-8").read()
    assert "| concat (mode fe) | 8 | 10 | +5.0 ± 0.0 (3) |" in text
    assert "| concat (mode ft) | 8 | 10 | +10.0 ± 0.0 (3) |" in text


def test_a_report_over_two_cache_entries_is_refused(tmp_path):
    """A results file put together by hand from two entries' sweeps: a row would average two datasets."""
    from layerfuse.errors import LayerfuseError

    records = [dict(_record("concat", s, 0.5), cache_key=key, dataset=key, run_id=f"c-{s}-{key}")
               for key in ("wnut", "toy") for s in range(3)]
    with pytest.raises(LayerfuseError, match="holds runs on 2 cache entries"):
        report.render(records, str(tmp_path))


def test_one_run_id_on_two_cache_entries_in_a_results_file_is_refused(tmp_path):
    """Read by run id, the second entry's runs silently replaced the first's."""
    import json

    from layerfuse.errors import LayerfuseError
    from layerfuse.experiments.results import read_results

    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(dict(_record("concat", 0, 0.5), cache_key=key, dataset=key)) + "\n"
                            for key in ("wnut", "toy")))
    with pytest.raises(LayerfuseError, match=r"results.jsonl:2: run concat-n8-e10-s0\S* is there on two cache"):
        read_results(str(path))


def test_curve_shots_no_run_has_is_refused_naming_the_runs_n(tmp_path):
    """`--report --curve-shots 2,16,all` where no run has N = 16 drew an empty panel titled "N = 16, 0 epochs"."""
    from layerfuse.errors import LayerfuseError

    records = [_record(f, s, 0.5, shots=n) for f in ("base", "concat") for s in range(2) for n in (2, 8)]
    with pytest.raises(LayerfuseError, match=r"--curve-shots 16,all: no run has that N \(the runs' N: 2, 8\)"):
        report.render(records, str(tmp_path), curve_shots=[2, 16, None])
    assert "steps" in report.render(records, str(tmp_path), curve_shots=[2, 8])


def test_the_report_names_a_label_set_other_than_ner(tmp_path):
    records = [dict(r, config={**r["config"], "labels": "chunk"}) for r in
               (_record(f, s, 0.5) for f in ("base", "concat") for s in range(2))]
    text = open(report.render(records, str(tmp_path))["table"], encoding="utf-8").read()
    assert text.startswith("# Sweep: m on d, chunk labels\n")
