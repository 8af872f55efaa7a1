"""What every grid script is run by (scripts/_common.py: `Study`): the common options beside the script's
own, its defaults, the text printed and written under the results header; and run on several cache
entries, one results file per entry; scripts/compare_extract_precision.py on the tiny model and data as
the example."""

from __future__ import annotations

import json


def test_a_study_parses_its_options_and_publishes(tiny_cache, tmp_path, capsys, load_script):
    common = load_script("_common")
    study = common.Study("a_grid", epochs=1, library_defaults=True, defaults=dict(seeds=1),
                         options=(("--flag", dict(default="x")),))
    md, out = tmp_path / "a.md", tmp_path / "runs.jsonl"
    argv = ["--cache", tiny_cache, "--shots", "2", "--threads", "0", "--flag", "y", "--out", str(out),
            "--table", str(md)]
    args = study.parse("A grid.\n\nMore.", argv)
    assert (args.flag, args.seeds, args.epochs, args.lr, args.fusions) == ("y", 1, 1, None, "base")
    entry = common.args_entry(args)
    by_entry = {name: common.run_conll_grid(args, entry, common.conll_grid(args),
                                            common.variant_results(args.out, name)) for name in ("a", "b")}
    for name in ("a", "b"):  # <--out stem>.<entry>.jsonl, one run each
        assert len((tmp_path / f"runs.{name}.jsonl").read_text().splitlines()) == 1
    records = by_entry["a"] + by_entry["b"]
    printed = study.publish(args, argv, "2 runs", title="A grid", records=records, dev="all of dev", note="A note.")
    assert printed == "2 runs" and capsys.readouterr().out == "\n2 runs\n"
    parts = md.read_text().split("\n\n")
    assert parts[0] == "# A grid" and parts[1].startswith("Made by `python scripts/a_grid.py --cache PATH/")
    assert parts[2].startswith("Machine: cpu: ") and parts[3] == "Dev: all of dev."
    assert parts[4:] == ["2 runs", "A note.\n"]


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
