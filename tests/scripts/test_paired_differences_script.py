"""scripts/paired_differences.py: per-seed differences between heads from per-run results files,
pairing only runs that saw the same sample, counting a run found in two files once, and FT against FE."""

from __future__ import annotations

import json

import pytest


def _run(fusion, seed, dev, *, mode="fe", sample=None, cache="c1", test=None):
    return {"run_id": f"{fusion}-{mode}-{seed}", "cache_key": cache, "sample_fingerprint": sample or f"s{seed}",
            "config": {"fusion": fusion, "shots": 8, "seed": seed, "mode": mode, "layer_score": "scaled",
                       "dev_sentences": None},
            "best_dev_f1": dev, "test_f1_at_best": dev if test is None else test, "device": "cuda",
            "versions": {"torch": "2.x"}}


def _write(path, runs):
    path.write_text("".join(json.dumps(r) + "\n" for r in runs), encoding="utf-8")
    return str(path)


def test_paired_rows(tmp_path, load_script):
    script = load_script("paired_differences")
    runs = [_run("concat", s, 0.40 + 0.01 * s) for s in range(3)]
    runs += [_run("dwatt", s, 0.42 + 0.01 * s) for s in range(3)]  # +2.0 on every seed
    runs += [_run("extra", 0, 0.30), _run("extra", 1, 0.31), _run("extra", 2, 0.99, sample="another")]
    runs += [_run("concat", s, 0.10, mode="ft") for s in range(3)]
    first = _write(tmp_path / "a.jsonl", runs)
    again = _write(tmp_path / "b.jsonl", runs[:3])  # the same runs on the same cache: counted once
    table = tmp_path / "paired.md"
    text = script.main([first, again, "--table", str(table)])
    rows = {line.split("|")[3].strip(): line.split("|") for line in text.splitlines()
            if line.startswith("| ") and "−" in line.split("|")[3]}
    dwatt = rows["dwatt − concat"]
    assert dwatt[4].strip() == "+2.0 ± 0.0 (3)" and dwatt[5].strip() == "above 0"
    assert dwatt[6].strip() == "+2.0, +2.0, +2.0" and dwatt[7].strip() == "3 of 3"
    # seed 2 of extra saw another sample: not paired
    assert rows["concat − extra"][4].strip().endswith("(2)")
    ft = rows["concat (FT) − concat (FE)"]
    assert ft[1].strip() == "FT against FE on the a" and ft[4].strip().startswith("-31.0 ± ")  # file a's runs
    assert "3 of them already counted from" in text
    assert table.read_text().startswith("# Paired per-seed differences between heads\n\nMade by `python scripts/")


def test_differences_inside_the_interval_read_inside(tmp_path, load_script):
    script = load_script("paired_differences")
    runs = [_run("concat", s, 0.5) for s in range(3)]
    runs += [_run("dwatt", s, d) for s, d in enumerate((0.52, 0.48, 0.505))]
    text = script.main([_write(tmp_path / "x.jsonl", runs), "--table", str(tmp_path / "t.md")])
    row = next(line for line in text.splitlines() if "| dwatt − concat |" in line)
    assert row.split("|")[5].strip() == "inside"
    assert row.split("|")[4].strip().startswith("+0.2 ± ")


@pytest.mark.parametrize("name", ["gpu/compare_fe_ft_conll.jsonl"])
def test_the_committed_files_are_read(name, load_script, tmp_path):
    script = load_script("paired_differences")
    text = script.main([name, "--table", str(tmp_path / "t.md")])
    assert "| backbone fine-tuned (FT) | 128 | dwatt − concat |" in text
