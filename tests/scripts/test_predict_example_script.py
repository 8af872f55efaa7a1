"""scripts/predict_example.py runs the `predict` page's commands as typed (here on the tiny entry) and
writes their real output, each block marked as not run by the docs tests."""

from __future__ import annotations

import json


def test_the_page_is_the_commands_and_their_output(tiny_cache, tmp_path, load_script):
    table = tmp_path / "predict_example.md"
    load_script("predict_example").main(["--cache", tiny_cache, "--shots", "2", "--epochs", "2",
                                         "--table", str(table)])
    text = table.read_text(encoding="utf-8")
    blocks = text.split("```console\n")[1:]
    assert [b.split("\n", 1)[0].split(" --")[0] for b in blocks] == ["$ train-head", "$ layerfuse predict",
                                                                     "$ layerfuse predict"]
    assert text.count("<!-- not run by the tests") == 3
    assert "Dev F1 at the " in text and "/tmp" not in text
    json_lines = blocks[2].split("\n```")[0].splitlines()[1:]
    assert [json.loads(line)["text"].split()[0] for line in json_lines] == ["German", "Brazilian"]
