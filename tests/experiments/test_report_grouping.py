"""A report groups its records once: each table and figure of a render grouped them again (by cell, at
each cell's chosen rate), a dozen passes over a results file of tens of thousands of runs."""

from __future__ import annotations

from layerfuse.experiments import report

LRS = (1e-4, 1e-3, 1e-2)


def _record(fusion, shots, lr, seed):
    f1 = 0.3 + 0.1 * ("base", "concat", "dwatt").index(fusion) + 0.01 * seed + lr
    record = {"config": {"fusion": fusion, "shots": shots, "epochs": 5, "seed": seed, "lr": lr},
              "best_dev_f1": f1, "test_f1_at_best": f1, "model": "m", "dataset": "d", "sample_fingerprint": seed,
              "evals": [{"step": s, "dev_f1": f1 * s / 2} for s in (1, 2)], "seconds": {"total": 1.0}}
    if fusion == "dwatt":
        record["layer_usage"] = {"layers": [1, 2], "share": [0.4, 0.6], "top_weight": 0.6, "entropy": 0.5}
    return record


def test_a_render_labels_and_weighs_each_record_a_fixed_number_of_times(tmp_path, monkeypatch):
    records = [_record(fusion, shots, lr, seed) for fusion in ("base", "concat", "dwatt") for shots in (8, 16)
               for lr in LRS for seed in range(3)]
    calls = {"label": 0, "diverged": 0}
    for name in calls:
        real = getattr(report, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(report, name, counted)
    paths = report.render(records, str(tmp_path), per_lr=True)
    text = open(paths["table"]).read()
    assert "## lr 0.01" in text and "Each head against base" in text and "Attention over layers" in text
    assert set(paths) == {"table", "shots", "layers", "steps"}  # every table and figure drawn
    # grouping by cell once, the rates' own tables, the pairing with base (two labels a run): not once a figure
    assert calls["label"] <= 4 * len(records)
    assert calls["diverged"] <= 3 * len(records)  # the chosen rates once, the rates' own tables, the diverged note
