"""scripts/bench_pack.py on the tiny cache: one row per fusion and a total, and without dropout the
packed runs' F1 equals their solo runs'."""

from __future__ import annotations


def test_bench_pack_script(tiny_cache, tmp_path, load_script):
    script = load_script("bench_pack")
    report = tmp_path / "bench_pack.md"
    text = script.main(["--cache", tiny_cache, "--fusions", "concat,dwatt", "--shots", "2", "--seeds", "2",
                        "--epochs", "2", "--eval-points", "1", "--dropout", "0", "--report", str(report)])
    rows = [line for line in text.splitlines() if line.startswith(("| concat", "| dwatt", "| all"))]
    assert len(rows) == 3
    assert all(row.endswith("| 0.00 | 0.00 |") for row in rows)  # mean and max |ΔF1|
    assert report.read_text().endswith(text + "\n") and "Made by `python scripts/bench_pack.py" in report.read_text()
