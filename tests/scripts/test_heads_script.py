"""scripts/run_heads_conll.py on the tiny cache: one line per run, and a rerun (of a results file
written before TrainConfig grew a field) trains nothing and prints the same table."""

from __future__ import annotations

import json


def test_conll_script_resumes(tiny_cache, tmp_path, capsys, monkeypatch, load_script):
    script = load_script("run_heads_conll")
    out, md = tmp_path / "runs.jsonl", tmp_path / "table.md"
    args = ["--cache", tiny_cache, "--fusions", "base,scalarmix", "--shots", "2,4", "--seeds", "2", "--epochs", "1",
            "--out", str(out), "--table", str(md)]
    text = script.main(args)
    assert len(out.read_text().splitlines()) == 8
    header = md.read_text().split("\n\n")
    shown = [a if not a.startswith("/") else "PATH/" + a.rsplit("/", 1)[-1] for a in args]  # machine paths
    assert header[1] == f"Made by `python scripts/run_heads_conll.py {' '.join(shown)}`."
    assert header[2].startswith("Machine: cpu: ") and header[3].startswith("Dev: all ")
    assert md.read_text().endswith(load_script("_common").public_path(text) + "\n")  # machine paths as PATH/...
    records = [json.loads(line) for line in out.read_text().splitlines()]
    for record in records:  # as an older layerfuse wrote them, before TrainConfig grew a field
        del record["config"]["warmup"]
    out.write_text("".join(json.dumps(r) + "\n" for r in records))

    def no_training(*args, **kwargs):
        raise AssertionError("a run already in the results file was repeated")

    monkeypatch.setattr("layerfuse.training.loop.train_head", no_training)
    capsys.readouterr()
    assert script.main(args) == text
    assert len(out.read_text().splitlines()) == 8
    printed = capsys.readouterr()
    assert "8 of 8 runs already" in printed.err
    assert "| scalarmix | 234 |" in printed.out and "(2)" in printed.out
    row = next(line for line in printed.out.splitlines() if line.startswith("| scalarmix |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 2 + 3 * 2 and "-" not in cells[2:6]  # dev and test F1 per N, all filled
