"""scripts/bench_int8_write.py on a small shape: a row per way, int8 at about half float16's bytes."""

from __future__ import annotations


def test_bench_int8_write_script(tmp_path, load_script):
    script = load_script("bench_int8_write")
    text = script.main(["--layers", "3", "--dim", "64", "--units", "2", "--repeats", "1",
                        "--table", str(tmp_path / "t.md")])
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in text.splitlines()
            if line.startswith("| float16") or line.startswith("| int8")}
    assert len(rows) == 3
    fp16 = float(rows["float16"][1].replace(",", ""))
    for name, cells in rows.items():
        if name.startswith("int8"):
            assert 0.45 < float(cells[1].replace(",", "")) / fp16 < 0.65  # 64 + 4 bytes against 128 a vector
    assert (tmp_path / "t.md").read_text().startswith("# The write path alone")
