"""The recipe every grid script is a config of (scripts/_common.py: run_grid_script): one results file
per cache entry, the script's own options beside the grid's, the text printed and written under the
results header; scripts/compare_extract_precision.py on the tiny model and data as the example."""

from __future__ import annotations

import json


def test_a_config_runs_on_each_entry_into_its_own_file(tiny_cache, tmp_path, capsys, load_script):
    common = load_script("_common")
    seen = {}

    def text(run):
        seen.update(run=run)
        return f"{len(run.records)} runs on {', '.join(run.by_entry)}; --flag {run.args.flag}"

    config = dict(name="a_grid", fusions="base", epochs=1, entries=lambda args: {"a": common.args_entry(args),
                                                                                   "b": common.args_entry(args)},
                  options=[("--flag", dict(default="x"))], text=text, title=lambda run: "A grid",
                  note=lambda run: "A note.", dev=lambda run: "all of dev")
    md, out = tmp_path / "a.md", tmp_path / "runs.jsonl"
    argv = ["--cache", tiny_cache, "--shots", "2", "--seeds", "1", "--threads", "0", "--flag", "y",
            "--out", str(out), "--table", str(md)]
    printed = common.grid_main(config, "A grid.\n\nMore.")(argv)

    assert printed == "2 runs on a, b; --flag y" and capsys.readouterr().out == "\n" + printed + "\n"
    for name in ("a", "b"):  # <--out stem>.<entry>.jsonl, one run each
        assert len((tmp_path / f"runs.{name}.jsonl").read_text().splitlines()) == 1
    run = seen["run"]
    assert run.planned == 2 and run.device == "cpu" and run.entry is run.entries["a"]
    parts = md.read_text().split("\n\n")
    assert parts[0] == "# A grid" and parts[1].startswith("Made by `python scripts/a_grid.py --cache PATH/")
    assert parts[2].startswith("Machine: cpu: ") and parts[3] == "Dev: all of dev."
    assert parts[4:] == [printed, "A note.\n"]


def test_extract_precision_on_both_caches(tiny_bert_dir, tiny_conll_dir, tmp_path, load_script):
    script = load_script("compare_extract_precision")
    md, out = tmp_path / "table.md", tmp_path / "runs"
    paths = {"--model": tiny_bert_dir, "--data": tiny_conll_dir, "--cache-dir": tmp_path / "cache", "--out": out,
             "--table": md}
    text = script.main([str(a) for pair in paths.items() for a in pair]
                       + "--fusions concat --shots 2 --epochs 1 --seeds 2 --workers 0".split())

    runs = {p: [json.loads(line) for line in (out / f"{p}.jsonl").read_text().splitlines()] for p in ("fp32", "bf16")}
    assert len(runs["fp32"]) == len(runs["bf16"]) == 2
    assert runs["fp32"][0]["cache_key"] != runs["bf16"][0]["cache_key"]
    assert [r["run_id"] for r in runs["fp32"]] == [r["run_id"] for r in runs["bf16"]]  # the same runs on each
    rows = [line for line in text.splitlines() if line.startswith(("| fp32 |", "| bf16 |"))]
    assert [row.split("|")[3].strip() for row in rows] == ["concat", "concat"]
    assert text.splitlines()[-1].startswith("bf16 minus fp32, seed by seed (dev F1 x100): concat: ")
    assert "Made by `python scripts/compare_extract_precision.py" in md.read_text()
