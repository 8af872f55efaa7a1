"""scripts/compare_fe_ft_conll.py on the tiny cache: one FE and one FT run, a table with both
columns filled, and a rerun that trains nothing."""

from __future__ import annotations

import json


def test_compare_fe_ft_fills_both_columns_and_resumes(tiny_cache, tmp_path, monkeypatch, capsys, load_script):
    script = load_script("compare_fe_ft_conll")
    out, md = tmp_path / "runs.jsonl", tmp_path / "table.md"
    argv = ["--cache", tiny_cache, "--fusions", "base", "--shots", "2", "--epochs", "1", "--seeds", "1",
            "--lr", "1e-3", "--threads", "0", "--out", str(out), "--table", str(md)]
    text = script.main(argv)

    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["config"]["mode"] for r in records) == ["fe", "ft"]
    ft = next(r for r in records if r["config"]["mode"] == "ft")
    assert ft["backbone_params"] > 0 and ft["config"]["dev_sentences"] == 1000
    row = next(line for line in text.splitlines() if line.startswith("| base | 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 11 and "-" not in cells  # FE and FT dev and test F1, FT − FE, seconds, params all filled
    assert all(cells[i].endswith("(1)") for i in (2, 3, 5, 6))  # dev F1, FE and FT; test F1, FE and FT
    assert md.read_text().endswith(text + "\n")

    def no_training(*args, **kwargs):
        raise AssertionError("a run already in the results file was repeated")

    monkeypatch.setattr("layerfuse.training.loop.train_head", no_training)
    capsys.readouterr()
    again = script.main(argv)  # everything is in the results file: nothing runs
    assert capsys.readouterr().err.count("1 of 1 runs already") == 2  # one grid per mode
    assert len(out.read_text().splitlines()) == 2 and again == text
