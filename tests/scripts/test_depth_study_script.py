"""scripts/depth_study_conll.py on two tiny backbones of different depth: both protocols' rows with
gains over Base, the auto:K against top-K rows, both figures, and a rerun that trains nothing."""

from __future__ import annotations


def test_depth_study_on_two_depths(tiny_conll_dir, tiny_bert_dir, tiny_roberta_dir, tmp_path, monkeypatch, load_script):
    script = load_script("depth_study_conll")
    argv = ["--data", str(tiny_conll_dir), "--models", f"{tiny_bert_dir},{tiny_roberta_dir}", "--shots", "2",
            "--seeds", "2", "--epochs", "1", "--top-k", "1", "--workers", "0", "--dev-sentences", "0",
            "--fusions", "base,concat,dwatt", "--out", str(tmp_path / "runs"),
            "--table", str(tmp_path / "docs" / "depth.md")]
    text = script.main(argv)
    rows = [line for line in text.splitlines() if line.startswith(f"| {tiny_bert_dir} (L=2) |")]
    heads = {(r.split("|")[2].strip(), r.split("|")[3].strip()) for r in rows}
    assert heads == {("layerfuse", "base"), ("layerfuse", "concat"), ("layerfuse", "dwatt (scaled)"),
                     ("layerfuse", "dwatt (paper)"), ("paper", "base"), ("paper", "concat"),
                     ("paper", "dwatt (paper)")}
    concat = next(r for r in rows if "| layerfuse | concat |" in r)
    assert concat.split("|")[7].strip() != "-" and "(2)" in concat  # a gain over base, two seeds
    assert any(line.startswith(f"| {tiny_roberta_dir} | dwatt | 2 | auto:1 |") for line in text.splitlines())
    assert any(line.startswith(f"| {tiny_roberta_dir} | concat | 2 | 3..3 |") for line in text.splitlines())
    for name in ("gains_over_base.png", "nu_by_relative_depth.png"):
        assert (tmp_path / "docs" / f"depth_{name}").stat().st_size > 1000
    assert "\n\nDev: all 40 dev sentences.\n\n" in (tmp_path / "docs" / "depth.md").read_text()

    def no_training(*args, **kwargs):
        raise AssertionError("a run already in the results file was repeated")

    monkeypatch.setattr("layerfuse.training.loop.train_head", no_training)
    assert script.main(argv) == text
