"""Which layers a head uses: the numbers against a hand computation on tiny heads."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from layercache.fusions import TokenTagger
from layercache.training.data import IGNORE, SplitArrays
from layercache.training.diagnostics import describe, layer_usage

L, D = 3, 8


def _split() -> SplitArrays:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 9).astype(np.int64)
    labels[4] = IGNORE  # not a word's first row: not counted
    return SplitArrays("dev", rng.standard_normal((9, L, D)).astype(np.float16), labels, np.array([0, 4, 9]),
                       (2, 4, 6), np.array([0, 1]))


def _tagger(fusion: str, **kw) -> TokenTagger:
    torch.manual_seed(0)
    tagger = TokenTagger(fusion=fusion, n_layers=L, dim=D, num_heads=2, ffn_dim=16, n_labels=3, **kw).eval()
    with torch.no_grad():
        for p in tagger.parameters():
            p.copy_(torch.randn_like(p))
    return tagger


def _usage(tagger, split):
    return layer_usage(tagger, split, layers=split.layers, device=torch.device("cpu"), batch_size=64,
                       autocast=contextlib.nullcontext())


@pytest.mark.parametrize("layer_score", ["paper", "scaled"])
def test_dwatt_usage_by_hand(layer_score):
    split, tagger = _split(), _tagger("dwatt", layer_score=layer_score)
    fusion = tagger.fusion
    z = torch.from_numpy(split.hidden.astype(np.float32))[split.labels != IGNORE]  # [tokens, L, d]
    top = z[:, -1]
    query = 1 + F.elu(top + fusion.query_mlp(top))
    keys = fusion.key(fusion.k_pos)  # [L, d]
    scores = (query @ keys.T) * (D ** -0.5 if layer_score == "scaled" else 1.0)
    w = torch.softmax(scores, dim=-1).detach().numpy()  # [tokens, L]
    usage = _usage(tagger, split)
    assert usage["layers"] == [2, 4, 6]
    np.testing.assert_allclose(usage["mean_weight"], w.mean(0), rtol=1e-5)
    np.testing.assert_allclose(usage["share"], w.mean(0), rtol=1e-5)
    assert usage["entropy"] == pytest.approx(float(-(w * np.log(w)).sum(1).mean()), rel=1e-5)
    assert usage["top_weight"] == pytest.approx(float(w.max(1).mean()), rel=1e-5)
    assert 0 <= usage["entropy"] <= math.log(L)


def test_scalarmix_and_concat_usage_by_hand():
    split = _split()
    mix = _tagger("scalarmix")
    usage = _usage(mix, split)
    np.testing.assert_allclose(usage["weight"], torch.softmax(mix.fusion.weights.detach(), 0).numpy(), rtol=1e-6)
    concat = _tagger("concat")
    w = concat.fusion.proj.weight.detach()  # [d, L*d], block n = columns n*d:(n+1)*d
    norms = [float(w[:, n * D:(n + 1) * D].norm()) for n in range(L)]
    usage = _usage(concat, split)
    np.testing.assert_allclose(usage["block_norm"], norms, rtol=1e-6)
    np.testing.assert_allclose(usage["share"], np.array(norms) / sum(norms), rtol=1e-6)
    assert describe(usage).startswith("layers used (share): 2:")


def test_heads_on_the_top_layer_report_nothing():
    for fusion in ("base", "extra"):
        assert _usage(_tagger(fusion), _split()) is None
    assert describe(None) == "layers used: the top layer only"
