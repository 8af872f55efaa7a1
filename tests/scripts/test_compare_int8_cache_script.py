"""scripts/compare_int8_cache.py on the tiny model and data: a float16 and an int8 cache, one head
trained on each with the same sample, and a table whose measurements and F1 cells are all filled."""

from __future__ import annotations

import json


def test_int8_against_float16(tiny_bert_dir, tiny_conll_dir, tmp_path, load_script):
    script = load_script("compare_int8_cache")
    out, md = tmp_path / "runs.jsonl", tmp_path / "table.md"
    argv = ["--model", str(tiny_bert_dir), "--data", str(tiny_conll_dir), "--cache-dir", str(tmp_path / "cache"),
            "--fusions", "concat", "--shots", "2", "--epochs", "1", "--seeds", "1", "--threads", "0",
            "--out", str(out), "--table", str(md)]
    text = script.main(argv)

    runs = {d: [json.loads(line) for line in (tmp_path / f"runs.{d}.jsonl").read_text().splitlines()]
            for d in ("float16", "int8")}
    assert runs["float16"][0]["cache_key"] != runs["int8"][0]["cache_key"]
    assert runs["float16"][0]["run_id"] == runs["int8"][0]["run_id"]  # the same run on both caches
    lines = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]]
             for line in text.splitlines() if line.startswith("| ")}
    fp16, int8 = (float(c.replace(",", "")) for c in lines["bytes per word (all splits)"])
    assert int8 < 0.75 * fp16  # one byte per value and a scale per vector, against two bytes
    assert all(c != "-" for c in lines["concat N = 2, dev F1"])
    assert "Made by `python scripts/compare_int8_cache.py" in md.read_text()
