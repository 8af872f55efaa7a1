"""scripts/paired_grid_conll.py on the tiny cache: the grid runs seed by seed into its results file,
its records are copied beside the table, the heads of one seed are paired (the same sample), and
--no-run reports a grid cut short with the honest count of its runs."""

from __future__ import annotations

import json


def _rows(text: str, first: str) -> dict:
    return {line.split("|")[2].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in text.splitlines() if line.startswith(f"| {first} |")}


def test_paired_grid(tiny_cache, tmp_path, load_script):
    script = load_script("paired_grid_conll")
    out, md, records = tmp_path / "runs.jsonl", tmp_path / "table.md", tmp_path / "records.jsonl"
    args = ["--cache", tiny_cache, "--shots", "2", "--seeds", "2", "--epochs", "2", "--precision", "fp32",
            "--workers", "0", "--out", str(out), "--table", str(md), "--records", str(records)]
    text = script.main(args)
    runs = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(runs) == 6 and {r["config"]["fusion"] for r in runs} == {"dwatt", "concat", "extra"}
    assert all(len(r["evals"]) == 2 for r in runs)  # evaluated after every epoch
    assert all(r["config"]["dev_sentences"] is None for r in runs)  # the whole dev split
    paired = _rows(text, "2")
    assert set(paired) == {"dwatt − concat", "dwatt − extra", "concat − extra"}
    assert all(row[2].endswith("(2)") for row in paired.values())  # two seeds, each pair on its sample
    by = {(r["config"]["fusion"], r["config"]["seed"]): 100 * r["best_dev_f1"] for r in runs}
    per_seed = [f"{by['dwatt', s] - by['concat', s]:+.1f}" for s in (0, 1)]
    assert paired["dwatt − concat"][4] == ", ".join(per_seed)
    assert md.read_text().startswith("# Figures 2-4 paired by seed")
    assert "planned runs finished" not in text

    # a grid cut short: one seed's runs only, reported as such without training
    lines = out.read_text().splitlines()
    seed0 = [line for line in lines if json.loads(line)["config"]["seed"] == 0]
    out.write_text("\n".join(seed0) + "\n")
    short = script.main([*args, "--no-run"])
    assert "3 of the 6 planned runs finished" in short
    assert all(row[2].endswith("(1)") for row in _rows(short, "2").values())
