"""scripts/compare_layers_conll.py on the tiny cache: one table row per layer choice, the bytes each
run loaded recorded, and a rerun that skips the runs already in its results file."""

from __future__ import annotations

import json


def test_table_has_a_row_per_choice_and_rerun_skips_done_runs(tiny_cache, tmp_path, monkeypatch, load_script):
    script = load_script("compare_layers_conll")
    out = tmp_path / "runs.jsonl"
    argv = ["--cache", tiny_cache, "--out", str(out), "--fusions", "concat", "--choices", "all,auto:1,2",
            "--shots", "2", "--seeds", "1", "--epochs", "1", "--eval-points", "2", "--device", "cpu",
            "--table", ""]
    text = script.main(argv)

    rows = [line for line in text.splitlines() if line.startswith("| concat |")]
    assert [row.split("|")[3].strip() for row in rows] == ["all (1..2)", "auto:1", "2"]
    assert all(" (1) |" in row for row in rows)  # one run each, none missing

    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["config"]["layers"] for r in records] == [None, "auto:1", "2"]  # `all` runs as the default layers
    by_choice = {r["config"]["layers"]: r for r in records}
    assert by_choice[None]["layers"] == [1, 2] and by_choice["2"]["layers"] == [2]
    assert len(by_choice["auto:1"]["layers"]) == 1 and by_choice["auto:1"]["layer_scores"]
    assert by_choice["auto:1"]["train_layers_loaded"] == [1, 2]  # ranked over both, dev read for one only
    for r in records:
        assert r["bytes_loaded"] == r["bytes"]["train"] + r["bytes"]["dev"] > 0
        assert r["wall_seconds"] >= r["load_seconds"] > 0
    # the same dev rows and sample rows: two layers cost twice one (float16, d = 32)
    assert by_choice[None]["bytes"]["dev"] == 2 * by_choice["2"]["bytes"]["dev"]
    train_bytes = {choice: r["bytes"]["train"] for choice, r in by_choice.items()}
    assert train_bytes["auto:1"] == train_bytes[None] == 2 * train_bytes["2"]
    assert by_choice["2"]["bytes"]["dev"] % (32 * 2) == 0

    def no_training(*args, **kwargs):
        raise AssertionError("a run already in the results file was repeated")

    size = out.stat().st_size
    with monkeypatch.context() as patch:  # where the runner finds train_head for every run
        patch.setattr("layerfuse.training.loop.train_head", no_training)
        assert script.main(argv) == text  # the same table, from the file
    assert out.stat().st_size == size

    # widening the grid runs only the new choice
    wider = script.main(argv[:7] + ["all,auto:1,2,1"] + argv[8:])
    assert len(out.read_text().splitlines()) == 4
    assert [line.split("|")[3].strip() for line in wider.splitlines() if line.startswith("| concat |")] \
        == ["all (1..2)", "auto:1", "2", "1"]
