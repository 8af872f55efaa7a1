"""`extract --dry-run`: sizes from the config (no weights), within 5% of what extraction then
writes, nothing written by the dry run, and a run that cannot fit refused before it writes."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from layerfuse.cache.manage import bytes_on_disk
from layerfuse.cli.extract import main as extract_cli
from layerfuse.errors import LayerfuseError
from layerfuse.extract import estimate as estimate_module
from layerfuse.extract.estimate import estimate, free_space
from layerfuse.extract.run import ExtractConfig, extract


def _config(model_dir, data_dir, root, **kw) -> ExtractConfig:
    return ExtractConfig(model=str(model_dir), dataset=str(data_dir), cache_dir=str(root), **kw)


def _cli(model_dir, data_dir, root, *args):
    result = CliRunner().invoke(extract_cli, ["--model", str(model_dir), "--dataset", str(data_dir), "--cache-dir",
                                              str(root), "--dry-run", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _no_weights(monkeypatch):
    """Any attempt to load the encoder's weights fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("the dry run loaded weights")

    monkeypatch.setattr("layerfuse.extract.run.load_model", refuse)
    monkeypatch.setattr("transformers.AutoModel.from_pretrained", refuse)


@pytest.mark.parametrize("options", [
    {"dtype": "float16"},
    {"dtype": "float32"},
    {"dtype": "float16", "unit_rows": 256},  # several shards, the last one partial
    {"dtype": "bfloat16", "granularity": "subword"},
])
def test_dry_run_matches_what_extract_writes(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch, options):
    root = tmp_path / "root"
    config = _config(tiny_bert_dir, tiny_conll_dir, root, **options)
    with monkeypatch.context() as m:
        _no_weights(m)
        est = estimate(config)
        args = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
        out = _cli(tiny_bert_dir, tiny_conll_dir, root, *args)
    assert not root.exists()  # not even the root directory
    assert out.startswith(f"dry run, nothing written: {est.path}\n")
    unit = "subwords" if options.get("granularity") == "subword" else "words"
    for s in est.splits:
        assert f"{s.rows:,} rows ({unit})" in out
    assert "free space at" in out and "(fits)" in out
    assert "estimated time: unknown" in out  # nothing measured on this root yet

    result = extract(config, progress=False, log=lambda m: None)
    assert result.path == est.path
    actual = bytes_on_disk(result.path)
    assert 0.95 <= est.total / actual <= 1.05, (est.total, actual)
    for s, done in zip(est.splits, result.splits):
        assert (s.split, s.rows, s.words) == (done.split, done.rows, done.words)
        assert 0.95 <= s.bytes / done.bytes_on_disk <= 1.05, (s.split, s.bytes, done.bytes_on_disk)


def test_every_word_counts_even_without_subwords(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """The train split holds a zero-width word: it is a row like any other."""
    from layerfuse.extract.datasets import load_dataset

    est = estimate(_config(tiny_bert_dir, tiny_conll_dir, tmp_path, splits=("train",)))
    words = sum(len(w) for w, _ in load_dataset(str(tiny_conll_dir)).splits["train"])
    assert est.splits[0].rows == est.splits[0].words == words


def test_complete_splits_are_reused_and_the_rate_comes_from_the_entry(tiny_bert_dir, tiny_conll_dir, tmp_path):
    extract(_config(tiny_bert_dir, tiny_conll_dir, tmp_path, splits=("dev",)), progress=False, log=lambda m: None)
    before = sorted(p for p, _, _ in os.walk(tmp_path))
    est = estimate(_config(tiny_bert_dir, tiny_conll_dir, tmp_path))
    by_split = {s.split: s for s in est.splits}
    assert by_split["dev"].reused and by_split["dev"].to_write == 0
    assert not by_split["train"].reused and by_split["train"].to_write > 0
    assert est.to_write == by_split["train"].to_write + by_split["test"].to_write  # the entry's metadata exists
    assert est.rate and est.path in est.rate_source
    assert est.seconds == pytest.approx((by_split["train"].words + by_split["test"].words) / est.rate)
    out = _cli(tiny_bert_dir, tiny_conll_dir, tmp_path)
    assert "reused, 0 B to write" in out and f"as measured by {est.path}" in out
    assert sorted(p for p, _, _ in os.walk(tmp_path)) == before


def test_remote_root_free_space_is_unknown(tiny_bert_dir, tiny_conll_dir):
    assert free_space("memory://nowhere") is None
    out = _cli(tiny_bert_dir, tiny_conll_dir, "memory://dry-run-root", "--splits", "dev")
    assert "free space at memory://dry-run-root: unknown" in out


def test_free_space_of_a_missing_root_is_its_ancestors(tmp_path):
    assert free_space(str(tmp_path / "a" / "b")) > 0
    assert not (tmp_path / "a").exists()


def test_a_run_that_cannot_fit_writes_nothing(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch):
    root = tmp_path / "root"
    config = _config(tiny_bert_dir, tiny_conll_dir, root, splits=("dev",))
    need = estimate(config).to_write
    monkeypatch.setattr(estimate_module, "free_space", lambda root: need - 1)
    with pytest.raises(LayerfuseError, match=f"needs about .* more at {root} but only") as err:
        extract(config, progress=False, log=lambda m: None)
    assert "\n" not in str(err.value)
    assert not root.exists()  # no entry, no lock file
    result = CliRunner().invoke(extract_cli, ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir),
                                              "--cache-dir", str(root), "--splits", "dev", "--quiet"])
    assert result.exit_code == 1 and result.output.startswith("error: extract needs about")
    assert not root.exists()
    monkeypatch.setattr(estimate_module, "free_space", lambda root: need)  # exactly enough: it runs
    assert extract(config, progress=False, log=lambda m: None).splits[0].rows > 0


def test_mlm_dry_run_matches_what_extract_writes(tiny_bert_dir, tmp_path):
    from conftest import make_sentences

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split, n, seed in (("train", 40, 5), ("dev", 8, 6)):
        text = "\n\n".join(" . ".join(" ".join(w) for w, _ in make_sentences(3, seed=seed * 100 + i)) for i in range(n))
        (corpus / f"{split}.txt").write_text(text + "\n")
    config = _config(tiny_bert_dir, corpus, tmp_path / "root", task="mlm", block_size=16, unit_rows=256)
    est = estimate(config)
    assert not (tmp_path / "root").exists()
    result = extract(config, progress=False, log=lambda m: None)
    assert [s.rows for s in est.splits] == [s.rows for s in result.splits]
    assert 0.95 <= est.total / bytes_on_disk(result.path) <= 1.05, (est.total, bytes_on_disk(result.path))


def test_a_dry_run_refuses_a_label_set_the_data_lacks_as_the_run_does(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """`--dry-run --labels ner,foo` is the same one-line error the real run gives, not a plan."""
    args = ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir), "--cache-dir", str(tmp_path / "root")]
    result = CliRunner().invoke(extract_cli, [*args, "--dry-run", "--labels", "ner,foo"])
    assert result.exit_code == 1 and result.output.startswith("error: --labels 'foo': "), result.output
    assert "dry run" not in result.output


def test_a_dry_run_under_torchrun_prints_its_plan_once(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch):
    """Every rank of `torchrun ... extract --dry-run` printed the whole plan; ranks other than 0 now say nothing."""
    args = ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir), "--cache-dir", str(tmp_path / "root"),
            "--dry-run"]
    monkeypatch.setenv("RANK", "1")
    other = CliRunner().invoke(extract_cli, args)
    assert other.exit_code == 0 and other.output == "", other.output
    monkeypatch.setenv("RANK", "0")
    first = CliRunner().invoke(extract_cli, args)
    assert first.exit_code == 0 and "dry run" in first.output, first.output
