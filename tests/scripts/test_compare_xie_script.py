"""scripts/compare_xie_conll.py on the tiny cache: each head on Xie's pick and on the top layer, paired
by seed; the paired grid's fusion heads set against the heads on the pick; the pick per N and seed is
the layer each run read; R+n's top-layer runs come from the grid's records unless --top names it."""

from __future__ import annotations

import json


def _pairs(text: str, n: str) -> dict:
    """The paired rows of N = ``n`` by their difference ('a − b')."""
    return {line.split("|")[2].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in text.splitlines() if line.startswith(f"| {n} |") and " − " in line.split("|")[2]}


def test_compare_xie(tiny_cache, tmp_path, load_script):
    grid_script, script = load_script("paired_grid_conll"), load_script("compare_xie_conll")
    common = ["--cache", tiny_cache, "--shots", "2", "--seeds", "2", "--epochs", "2", "--workers", "0"]
    grid = tmp_path / "grid.jsonl"
    grid_script.main([*common, "--precision", "fp32", "--out", str(tmp_path / "grid_runs.jsonl"), "--table", "",
                      "--records", str(grid), "--paper-score-lr", "3e-3"])
    out, records = tmp_path / "runs.jsonl", tmp_path / "records.jsonl"
    text = script.main([*common, "--out", str(out), "--table", str(tmp_path / "table.md"), "--grid", str(grid),
                        "--records", str(records)])
    runs = [json.loads(line) for line in records.read_text().splitlines()]
    heads = sorted({(r["config"]["fusion"], r["config"]["layers"]) for r in runs}, key=str)
    assert heads == sorted({("base", None), ("base", "xie"), ("extra", "xie")}, key=str)  # R+n's top: the grid's
    for r in runs:
        if r["config"]["layers"] == "xie":  # the lowest-nu layer of the run's own sample, alone
            scores = dict((layer, nu) for layer, nu in r["layer_scores"])
            assert r["layers"] == [min(scores, key=lambda layer: (scores[layer], layer))]
        else:
            assert r["layers"] == [2]  # the tiny backbone's top layer

    paired = _pairs(text, "2")
    assert {"base (xie) − base", "concat − extra (xie)", "dwatt − base (xie)"} <= set(paired)
    assert "extra (xie) − extra (fp32 against the paired grid's fp32)" in paired  # its top-layer runs: the grid's
    assert all(row[2].endswith("(2)") for row in paired.values())  # two seeds, each pair on its sample
    by = {(r["config"]["fusion"], r["config"]["layers"], r["config"]["seed"]): 100 * r["best_dev_f1"] for r in runs}
    per_seed = [f"{by['base', 'xie', s] - by['base', None, s]:+.1f}" for s in (0, 1)]
    assert paired["base (xie) − base"][4] == ", ".join(per_seed)
    # the grid's DWAtt is its scaled-score head; its paper-score head (run beside it) is not read as DWAtt
    dwatt = {r["config"]["seed"]: 100 * r["best_dev_f1"] for r in map(json.loads, grid.read_text().splitlines())
             if r["config"]["fusion"] == "dwatt" and r["config"]["layer_score"] == "scaled"}
    assert paired["dwatt − base (xie)"][4] == ", ".join(f"{dwatt[s] - by['base', 'xie', s]:+.1f}" for s in (0, 1))
    picks = next(line for line in text.splitlines() if line.startswith("| 2 |") and "of 2 |" in line)
    assert [int(c) for c in picks.strip("|").split("|")[1:3]] == [
        next(r["layers"][0] for r in runs if r["config"]["seed"] == s and r["config"]["layers"] == "xie")
        for s in (0, 1)]
