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


def test_bench_pack_script_mixes_n_and_rates_in_a_pack(tiny_cache, tmp_path, load_script):
    script = load_script("bench_pack")
    text = script.main(["--cache", tiny_cache, "--fusions", "concat", "--shots", "2,4", "--lrs", "1e-3,1e-2",
                        "--seeds", "1", "--epochs", "2", "--eval-points", "1", "--dropout", "0",
                        "--report", str(tmp_path / "mixed.md")])
    assert "packs of 4" in text and "learning rates 1e-3,1e-2" in text
    concat = next(line for line in text.splitlines() if line.startswith("| concat"))
    assert concat.startswith("| concat | 4 |") and concat.endswith("| 0.00 | 0.00 |")
