"""scripts/compare_extra_subword.py on the tiny model and data: a word-level and a subword-level
cache, the extra head trained on each, a table with both columns and their difference filled."""

from __future__ import annotations

import json
import re


def test_extra_on_words_and_subwords(tiny_bert_dir, tiny_conll_dir, tmp_path, load_script):
    script = load_script("compare_extra_subword")
    out, md = tmp_path / "runs.jsonl", tmp_path / "table.md"
    argv = ["--model", str(tiny_bert_dir), "--data", str(tiny_conll_dir), "--cache-dir", str(tmp_path / "cache"),
            "--fusions", "extra", "--shots", "2", "--epochs", "1", "--seeds", "1", "--threads", "0",
            "--out", str(out), "--table", str(md)]
    text = script.main(argv)

    word = [json.loads(line) for line in (tmp_path / "runs.word.jsonl").read_text().splitlines()]
    sub = [json.loads(line) for line in (tmp_path / "runs.subword.jsonl").read_text().splitlines()]
    assert len(word) == len(sub) == 1 and word[0]["cache_key"] != sub[0]["cache_key"]
    row = next(line for line in text.splitlines() if line.startswith("| extra | 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 9 and "-" not in cells  # dev and test F1 on both inputs, the difference, seconds
    rows = {g: int(n.replace(",", "")) for g, n in re.findall(r"(\w+): ([\d,]+) train rows", text)}
    assert rows["subword"] > rows["word"] > 0  # the subword cache has a row per subword
    assert "Made by `python scripts/compare_extra_subword.py" in md.read_text()
