"""MLM heads in FE mode on a tiny BERT's MLM cache: the masked-rows-only loss is the full loss, the
tied decoder is frozen, a short run beats the untrained reference, test is scored once at the best
dev loss, checkpoints round-trip, the CLI prints perplexity, and NER run ids stay as they were."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from mlm_fixtures import tiny_mlm_bert_dir, tiny_mlm_cache, tiny_text_dir  # noqa: F401 (fixtures)

from layerfuse.cache.reader import open_entry
from layerfuse.errors import LayerfuseError
from layerfuse.fusions import FUSIONS, FusedMaskedLM, count_parameters
from layerfuse.training import TrainConfig, load_data, load_for_run, train_head
from layerfuse.training.checkpoint import load_checkpoint, save_checkpoint
from layerfuse.training.data import IGNORE

MLM = dict(shots=None, seed=0, task="mlm", lr=1e-2, batch_size=8)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def entry(tiny_mlm_cache):
    return open_entry(tiny_mlm_cache)


@pytest.fixture(scope="module")
def data(entry):
    return load_data(entry)


@pytest.fixture(scope="module")
def reference(data):
    """Epochs 0: the pretrained model with its own (tied) MLM head on the top layer."""
    return train_head(TrainConfig(fusion="base", epochs=0, **MLM), data)


@pytest.fixture(scope="module")
def trained(data):
    return train_head(TrainConfig(fusion="concat", epochs=4, **MLM), data)


@pytest.mark.parametrize("fusion", sorted(FUSIONS))
def test_masked_rows_only_loss_equals_the_full_loss(fusion):
    torch.manual_seed(0)
    B, T, L, d, V = 3, 7, 2, 8, 50
    head = FusedMaskedLM(fusion=fusion, n_layers=L, dim=d, num_heads=2, ffn_dim=16, vocab_size=V,
                         extra_layers=1, dropout=0.0).double().eval()
    head.lm.freeze_to(torch.randn(V, d, dtype=torch.float64))
    hidden = torch.randn(B, T, L, d, dtype=torch.float64)  # [B, T, L, d]
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[2, 4:] = False
    labels = torch.full((B, T), IGNORE)
    labels[0, 1], labels[1, 3], labels[1, 5], labels[2, 0] = 4, 9, 17, 33
    rows = labels != IGNORE
    picked = head(hidden, mask, rows=rows)  # [R, V]
    assert picked.shape == (int(rows.sum()), V)
    full = head.lm(head.fusion(hidden, mask))  # [B, T, V]: every row through the vocabulary product
    expected = F.cross_entropy(full.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)
    assert F.cross_entropy(picked, labels[rows]).item() == pytest.approx(expected.item(), rel=1e-12)


def test_labels_are_token_ids_and_lm_arrays_are_loaded(entry, data):
    split = entry.split("dev")
    assert data.dev.labels.dtype == np.int64
    assert np.array_equal(data.dev.labels, split.labels)  # every row its own word: nothing re-masked to IGNORE
    assert 0 < np.mean(data.dev.labels != IGNORE) < 0.4
    assert data.lm["embeddings"].shape == (int(entry.meta["vocab_size"]), entry.dim)


def test_the_fe_decoder_is_frozen_and_not_part_of_the_head(data, trained):
    head = trained.tagger
    assert head.lm.embeddings is not None and not head.lm.embeddings.requires_grad
    assert "lm.embeddings" not in head.state_dict()  # the backbone's, not saved with the head
    assert all(p is not head.lm.embeddings for p in head.parameters())
    assert torch.equal(head.lm.embeddings, torch.as_tensor(data.lm["embeddings"]))  # untouched by training
    assert trained.params == count_parameters(head)


def test_the_reference_is_the_pretrained_mlm_head(data, reference):
    """Epochs 0 with base: the checkpoint's transform and bias, exactly (the cache's lm/* arrays)."""
    head = reference.tagger
    assert torch.equal(head.lm.dense.weight.detach(), torch.as_tensor(data.lm["dense_weight"]))
    assert torch.equal(head.lm.bias.detach(), torch.as_tensor(data.lm["decoder_bias"]))
    assert reference.total_steps == 0 and len(reference.evals) == 1
    assert reference.best_dev_ppl == pytest.approx(math.exp(reference.best_dev_loss))
    assert reference.best_dev_f1 is None and reference.test_ppl_at_best is not None


def test_training_lowers_dev_perplexity_below_the_reference(reference, trained):
    assert trained.best_dev_ppl < 0.8 * reference.best_dev_ppl, (trained.best_dev_ppl, reference.best_dev_ppl)
    assert [set(e) for e in trained.evals][0] >= {"step", "epoch", "train_loss", "dev_loss", "dev_ppl"}
    assert "dev_f1" not in trained.evals[0]


def test_test_perplexity_is_scored_once_at_the_lowest_dev_loss(data, monkeypatch):
    from layerfuse.training.tasks import MLM as MLMTask

    calls = []
    real = MLMTask.score

    def counting(self, head, split, **kw):
        calls.append(split.name)
        return real(self, head, split, **kw)

    monkeypatch.setattr(MLMTask, "score", counting)
    result = train_head(TrainConfig(fusion="scalarmix", epochs=3, **{**MLM, "lr": 0.3}), data)
    assert calls.count("test") == 1 and calls.count("dev") == 3
    best = min(result.evals, key=lambda e: e["dev_loss"])
    assert result.best_step == best["step"] and result.best_dev_loss == best["dev_loss"]
    assert [("test_ppl" in e) for e in result.evals].count(True) == 1 and best["test_ppl"] == result.test_ppl_at_best
    record = result.to_dict()
    assert record["test_ppl_at_best"] == result.test_ppl_at_best and record["best_dev_f1"] is None
    by_hand = real(MLMTask(), result.tagger, data.test.take_layers(result.layers), data=data,
                   device=torch.device("cpu"), batch_size=64, autocast=None)
    assert by_hand["ppl"] == pytest.approx(result.test_ppl_at_best, rel=1e-9)


def test_shots_are_blocks(entry):
    data = load_for_run(entry, layers=None, shots=5, seed=1)
    result = train_head(TrainConfig(fusion="dwatt", epochs=1, **{**MLM, "shots": 5, "seed": 1}), data)
    assert result.n_train_sentences == 5
    again = load_data(entry).sample(shots=5, seed=1)[0]
    assert np.array_equal(np.sort(again), data.train.sentence_ids)


def test_every_fusion_trains_on_mlm(data):
    for fusion in sorted(FUSIONS):
        result = train_head(TrainConfig(fusion=fusion, epochs=1, **{**MLM, "shots": 8}), data)
        assert math.isfinite(result.best_dev_ppl), fusion


def test_checkpoint_round_trip(tmp_path, entry, data, trained):
    save_checkpoint(tmp_path / "head", trained.tagger, tagger_kwargs=trained.tagger_kwargs, layers=trained.layers,
                    label_names=[], cache_meta=data.meta, config=trained.config, extra={"task": "mlm"})
    head, meta = load_checkpoint(tmp_path / "head", entry=entry)
    assert isinstance(head, FusedMaskedLM) and meta["format_version"] == 3 and meta["task"] == "mlm"
    with pytest.raises(LayerfuseError, match="not tied"):
        _ = head.lm.decoder_weight
    head.lm.freeze_to(torch.as_tensor(data.lm["embeddings"]))
    batch = data.dev.batch(np.arange(6), device="cpu")
    rows = batch.labels != IGNORE
    with torch.inference_mode():
        assert torch.equal(head(batch.hidden, batch.mask, rows=rows),
                           trained.tagger.eval()(batch.hidden, batch.mask, rows=rows))


def test_a_ner_cache_is_refused_for_mlm_and_back(tiny_cache, data):
    with pytest.raises(LayerfuseError, match="task 'mlm' needs a mlm cache entry"):
        train_head(TrainConfig(fusion="base", epochs=0, **MLM), load_data(open_entry(tiny_cache)))
    with pytest.raises(LayerfuseError, match="task 'ner' needs a ner cache entry"):
        train_head(TrainConfig(fusion="base", shots=None, epochs=0, seed=0), data)


def test_run_ids(tmp_path):
    from layerfuse.experiments.results import run_id

    ner = TrainConfig(fusion="dwatt", shots=8, epochs=25, seed=0, lr=5e-5, layer_score="paper")
    assert run_id(ner) == run_id({**ner.record(), "task": "ner"}) == "dwatt-n8-e25-s0-61f86969dc"  # the first release's
    assert run_id(TrainConfig(fusion="dwatt", shots=8, epochs=25, seed=0, lr=5e-5, layer_score="paper", task="mlm")) \
        != run_id(ner)


def test_cli_trains_and_prints_perplexity(tiny_mlm_cache, tmp_path):
    from layerfuse.cli.train import main

    out = CliRunner().invoke(main, ["--cache", tiny_mlm_cache, "--task", "mlm", "--fusion", "concat", "--epochs", "1",
                                    "--lr", "1e-2", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "best dev perplexity" in out.output and "test perplexity" in out.output
    record = json.loads((tmp_path / "concat-mlm-nall-e1-s0.json").read_text())
    assert record["config"]["task"] == "mlm" and record["best_dev_ppl"] > 1 and "dev_ppl" in record["evals"][0]
    head, meta = load_checkpoint(tmp_path / "concat-mlm-nall-e1-s0.head")
    assert isinstance(head, FusedMaskedLM) and meta["best_dev_ppl"] == record["best_dev_ppl"]
    dry = CliRunner().invoke(main, ["--cache", tiny_mlm_cache, "--task", "mlm", "--dry-run"])
    assert dry.exit_code == 0 and "LM head over 144 tokens" in dry.output, dry.output
    wrong = CliRunner().invoke(main, ["--cache", tiny_mlm_cache, "--epochs", "0"])
    assert wrong.exit_code != 0 and "needs a ner cache entry" in wrong.output


def test_a_split_that_tokenizes_to_nothing_is_refused_before_any_split_is_written(tiny_mlm_bert_dir, tmp_path):
    """Refused when its turn came, after train was written: an entry no rerun could finish."""
    from mlm_fixtures import write_text_corpus

    from layerfuse.extract.run import ExtractConfig, extract

    data = write_text_corpus(tmp_path / "text")
    (data / "dev.txt").write_text("\u200b\u200d\n\n\u0301\n", encoding="utf-8")  # nothing a tokenizer keeps
    config = ExtractConfig(model=str(tiny_mlm_bert_dir), dataset=str(data), task="mlm", block_size=16,
                           cache_dir=str(tmp_path / "cache"), unit_rows=256)
    with pytest.raises(LayerfuseError, match="split 'dev' of .* tokenizes to nothing"):
        extract(config, progress=False, log=lambda m: None)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())  # nothing written
