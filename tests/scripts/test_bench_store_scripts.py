"""scripts/bench_eval_pass.py and scripts/bench_grid.py on the tiny backbone: their tables, and the
figures a reader checks them by (a second run reads nothing; every run of the grid is counted)."""

from __future__ import annotations

import json


def test_bench_eval_pass_script(tiny_cache, tmp_path, load_script):
    script = load_script("bench_eval_pass")
    report = tmp_path / "pass.md"
    text = script.main(["--cache", tiny_cache, "--repeats", "1", "--report", str(report)])
    row = next(line for line in text.splitlines() if line.startswith("| after"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "held" and cells[6] == "0.0 MB"  # the second run in the process reads nothing
    figures = json.loads(report.with_suffix(".json").read_text())
    assert figures["after (this tree)"]["second_run_read_bytes"] == 0
    assert figures["after (this tree)"]["first_read_bytes"] > 0
    assert "Made by `python scripts/bench_eval_pass.py" in report.read_text()


def test_bench_grid_script(tiny_bert_dir, tiny_conll_dir, tmp_path, load_script):
    script = load_script("bench_grid")
    report = tmp_path / "grid.md"
    args = ["--out", str(tmp_path / "grid"), "--model", str(tiny_bert_dir), "--data", str(tiny_conll_dir),
            "--fusions", "concat,extra", "--shots", "2", "--epochs", "2", "--trials", "2", "--eval-points", "2",
            "--precision", "fp32", "--report", str(report)]
    text = script.main(args)
    figures = json.loads(report.with_suffix(".json").read_text())
    assert figures["runs"] == 4 and figures["eval_passes"] == 4 * (2 + 1)  # 2 dev evaluations, test at the best
    assert figures["extract_s"] is not None and "| extract |" in text
    assert 0 < figures["fraction_of_limit"] < 1
    again = json.loads((script.main(args), report.with_suffix(".json").read_text())[1])
    assert again["extract_s"] is None  # the entry is reused


def test_compare_code_versions_script(tiny_cache, tmp_path, load_script):
    script = load_script("compare_code_versions")
    report = tmp_path / "versions.md"
    text = script.main(["--cache", tiny_cache, "--before", "HEAD", "--fusions", "concat", "--shots", "2",
                        "--seeds", "2", "--epochs", "2", "--precision", "fp32", "--report", str(report)])
    row = next(line for line in text.splitlines() if line.startswith("| concat"))
    runs = json.loads(report.with_suffix(".json").read_text())
    assert len(runs["before"]) == len(runs["after"]) == 2
    # the committed code and the working tree train these runs alike (the training code is committed)
    assert [r["best_dev_f1"] for r in runs["before"]] == [r["best_dev_f1"] for r in runs["after"]]
    assert row.endswith("| 0.00 |")


def test_bench_ft_step_script(tiny_cache, tmp_path, load_script):
    script = load_script("bench_ft_step")
    report = tmp_path / "ft.md"
    text = script.main(["--cache", tiny_cache, "--shots", "4", "--steps", "2", "--report", str(report)])
    ratio = next(line for line in text.splitlines() if line.startswith("| FT step / backbone alone"))
    assert float(ratio.split("|")[2].strip().rstrip("x")) > 0
    assert "Made by `python scripts/bench_ft_step.py" in report.read_text()


def test_bench_grid_per_head_table_from_committed_records(load_script, tmp_path):
    """bench_grid.py --per-head renders the committed GPU grid's records: one row per fusion."""
    from pathlib import Path

    records = Path(__file__).resolve().parents[2] / "docs" / "results" / "bench_grid_gpu_runs.jsonl"
    report = tmp_path / "per_head.md"
    load_script("bench_grid").main(["--per-head", str(records), "--report", str(report), "--machine", "gpu: test"])
    rows = [r for r in report.read_text().splitlines() if r.startswith("| ") and r[2] != "f"]
    assert [r.split("|")[1].strip() for r in rows] == ["concat", "dwatt", "extra"]
    assert all(float(r.split("|")[3]) > 0 and float(r.split("|")[4]) > 0 for r in rows)


def test_bench_cache_read_script(tiny_cache, tmp_path, load_script):
    script = load_script("bench_cache_read")
    report = tmp_path / "read.md"
    text = script.main(["--cache", tiny_cache, "--split", "train", "--repeats", "2", "--report", str(report)])
    rows = [line for line in text.splitlines() if line.startswith("| one layer") or line.startswith("| side")]
    assert len(rows) == 2 and all(float(r.split("|")[2]) > 0 for r in rows)
    assert "| speed-up |" in text and "Made by `python scripts/bench_cache_read.py" in report.read_text()


def test_a_grid_stopped_by_an_interrupt_reports_its_phases_and_the_runs_it_finished(
        tiny_bert_dir, tiny_conll_dir, tmp_path, load_script, monkeypatch):
    """A time cap (`timeout --signal=INT`) stops the grid: the report still comes, with what ran."""
    import layerfuse.experiments as experiments

    real = experiments.run_grid

    def stopped_after_two(entry, configs, **kwargs):
        real(entry, configs[:2], **kwargs)  # writes the records of two runs, then the cap comes
        raise KeyboardInterrupt

    monkeypatch.setattr(experiments, "run_grid", stopped_after_two)
    report = tmp_path / "grid.md"
    text = load_script("bench_grid").main([
        "--out", str(tmp_path / "grid"), "--model", str(tiny_bert_dir), "--data", str(tiny_conll_dir),
        "--fusions", "concat,extra", "--shots", "2", "--epochs", "2", "--trials", "2", "--eval-points", "2",
        "--precision", "fp32", "--report", str(report)])
    figures = json.loads(report.with_suffix(".json").read_text())
    assert figures["runs"] == 2 and figures["planned_runs"] == 4 and figures["stopped"]
    assert figures["extract_s"] is not None and figures["load_s"] is not None
    assert "stopped by an interrupt, 2 of the 4 not run" in text
