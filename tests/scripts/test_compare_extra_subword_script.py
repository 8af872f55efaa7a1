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


def test_special_tokens_give_the_subword_input_its_specials(tiny_bert_dir, tiny_conll_dir, tmp_path, load_script):
    """--special-tokens: the subword cache also holds [CLS] and [SEP] (two more rows per sentence),
    its runs go to their own file, and the caption says so; the plain subword cache beside it stays."""
    script = load_script("compare_extra_subword")
    common = ["--model", str(tiny_bert_dir), "--data", str(tiny_conll_dir), "--cache-dir", str(tmp_path / "cache"),
              "--fusions", "extra", "--shots", "2", "--epochs", "1", "--seeds", "1", "--threads", "0",
              "--granularities", "subword", "--out", str(tmp_path / "runs.jsonl")]
    special = script.main(common + ["--special-tokens", "--table", str(tmp_path / "special.md")])
    plain = script.main(common + ["--table", str(tmp_path / "plain.md")])  # beside it, not swapped for it

    rows = {name: int(re.search(r"subword: ([\d,]+) train rows", text).group(1).replace(",", ""))
            for name, text in (("plain", plain), ("special", special))}
    assert rows["special"] > rows["plain"] > 0
    assert "special tokens not cached" in plain and "special tokens not cached" not in special
    assert "[CLS] and [SEP]" in special
    sub = [json.loads(line) for line in (tmp_path / "runs.subword.jsonl").read_text().splitlines()]
    with_specials = [json.loads(line) for line in (tmp_path / "runs.subword-special.jsonl").read_text().splitlines()]
    assert len(sub) == len(with_specials) == 1 and sub[0]["cache_key"] != with_specials[0]["cache_key"]
    row = next(line for line in special.splitlines() if line.startswith("| extra | 2 |"))
    assert [c.strip() for c in row.strip("|").split("|")][3] != "-"  # the subword dev F1 cell
    assert "--special-tokens" in (tmp_path / "special.md").read_text()
