"""scripts/compare_query_layer_conll.py on the tiny model and data: both query layers of each head,
a row per metric with both variants and their paired difference filled."""

from __future__ import annotations

import json


def test_query_layers_compared(tiny_bert_dir, tiny_conll_dir, tmp_path, load_script):
    script = load_script("compare_query_layer_conll")
    out, md = tmp_path / "runs.jsonl", tmp_path / "table.md"
    argv = ["--models", str(tiny_bert_dir), "--data", str(tiny_conll_dir), "--cache-dirs", str(tmp_path / "cache"),
            "--layers", "1", "--fusions", "dwatt,base", "--shots", "2", "--epochs", "1", "--seeds", "2",
            "--precision", "fp32", "--threads", "0", "--out", str(out), "--table", str(md)]
    text = script.main(argv)

    records = [json.loads(line) for line in (tmp_path / f"runs.{tiny_bert_dir.name}.jsonl").read_text().splitlines()]
    assert sorted((r["config"]["fusion"], r["config"]["query_layer"]) for r in records) == sorted(
        (f, q) for f in ("dwatt", "base") for q in ("fused", "top") for _ in range(2))
    assert {tuple(r["layers"]) for r in records if r["config"]["query_layer"] == "top"} == {(1, 2), (2,)}
    rows = [line for line in text.splitlines() if "| dwatt | 2 |" in line]
    assert len(rows) == 2 and all(line.count("(2)") == 3 for line in rows)  # fused, top, paired difference
    assert "Made by `python scripts/compare_query_layer_conll.py" in md.read_text()
