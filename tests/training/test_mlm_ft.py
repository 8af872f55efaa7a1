"""FT mode for MLM on the tiny BERT: the decoder is the backbone's embedding parameter (same
storage), train masks are redrawn each epoch while dev keeps the cache's, live rows are the cache's
rows, and FE and FT agree before training."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from mlm_fixtures import tiny_mlm_bert_dir, tiny_mlm_cache, tiny_text_dir  # noqa: F401 (fixtures)

from layerfuse.cache.reader import open_entry
from layerfuse.extract.masking import MaskVocab, mask_tokens
from layerfuse.finetune.data import live_data
from layerfuse.finetune.live import load_live_backbone
from layerfuse.training import TrainConfig, load_data, train_head
from layerfuse.training.data import IGNORE

FT = dict(fusion="concat", shots=6, epochs=2, seed=0, lr=1e-3, mode="ft", task="mlm", batch_size=4)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def entry(tiny_mlm_cache):
    return open_entry(tiny_mlm_cache)


@pytest.fixture(scope="module")
def live(entry):
    backbone = load_live_backbone(entry.meta, device=torch.device("cpu"))
    return live_data(entry, backbone, layers=range(1, entry.num_layers + 1))


def test_the_decoder_is_the_backbones_embedding_parameter(live):
    result = train_head(TrainConfig(**FT), live)
    embeddings = live.backbone.model.get_input_embeddings().weight
    decoder = result.tagger.lm.decoder_weight
    assert decoder is embeddings and decoder.data_ptr() == embeddings.data_ptr()
    assert "lm.embeddings" not in result.tagger.state_dict() and result.params < embeddings.numel()
    assert result.backbone_params >= embeddings.numel()  # trained once, as the backbone's
    assert math.isfinite(result.best_dev_ppl) and result.test_ppl_at_best is not None


def test_ft_trains_the_tied_embeddings_and_restarts_from_pretrained(live):
    live.backbone.reset()
    before = live.backbone.model.get_input_embeddings().weight.detach().clone()
    first = train_head(TrainConfig(**{**FT, "eval_points": 1}), live)
    assert not torch.equal(before, live.backbone.model.get_input_embeddings().weight.detach())
    second = train_head(TrainConfig(**{**FT, "eval_points": 1}), live)
    assert second.evals == first.evals  # every run starts from the pretrained weights, masks seeded


def test_train_masks_are_redrawn_each_epoch_and_dev_keeps_the_caches(entry, live):
    _, train = live.sample(shots=6, seed=0)
    vocab = MaskVocab.of(live.backbone.tokenizer)
    drawn = []
    for epoch in (1, 2):
        train.begin_epoch(epoch, seed=3)
        want = mask_tokens(train.ids, tokenizer_info=vocab, probability=0.15, rng=np.random.default_rng([3, epoch]))
        assert np.array_equal(train.inputs, want[0]) and np.array_equal(train.labels, want[1])
        drawn.append(train.labels.copy())
    assert not np.array_equal(*drawn)
    assert np.array_equal(np.where(train.labels != IGNORE, train.labels, train.inputs), train.ids)
    dev = entry.split("dev")
    live.dev.begin_epoch(1, seed=3)
    assert np.array_equal(live.dev.inputs, dev.input_ids) and np.array_equal(live.dev.labels, dev.labels)


def test_live_rows_are_the_cache_rows(entry, live):
    live.backbone.reset()
    live.backbone.eval()
    cached = load_data(entry).dev
    positions = np.arange(5)
    with torch.inference_mode():
        got = live.dev.batch(positions, device="cpu")
    want = cached.batch(positions, device="cpu")
    assert torch.equal(got.mask, want.mask) and torch.equal(got.labels, want.labels)
    assert torch.allclose(got.hidden, want.hidden, atol=2e-2, rtol=1e-2)  # the cache stores float16


def test_fe_and_ft_agree_before_training(entry, live):
    config = dict(fusion="base", shots=None, epochs=0, seed=0, task="mlm")
    fe = train_head(TrainConfig(**config), load_data(entry))
    ft = train_head(TrainConfig(**config, mode="ft"), live)
    assert ft.best_dev_ppl == pytest.approx(fe.best_dev_ppl, rel=1e-3)
