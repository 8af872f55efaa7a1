"""Which layers a head uses: the numbers against a hand computation on tiny heads."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from layerfuse.fusions import TokenTagger
from layerfuse.training.data import IGNORE, SplitArrays
from layerfuse.training.diagnostics import describe, layer_usage

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
    z = torch.from_numpy(split.hidden.astype(np.float32))[split.labels != IGNORE]  # [tokens, L, d]
    contribution = [float((z[:, n] @ w[:, n * D:(n + 1) * D].T).norm(dim=1).mean()) for n in range(L)]
    usage = _usage(concat, split)
    np.testing.assert_allclose(usage["block_norm"], norms, rtol=1e-6)
    np.testing.assert_allclose(usage["contribution"], contribution, rtol=1e-5)
    np.testing.assert_allclose(usage["share"], np.array(contribution) / sum(contribution), rtol=1e-5)
    assert describe(usage).startswith("layers used (share): 2:")


def test_concat_contribution_by_hand():
    """W_1 = I, W_2 = [[0, 3], [0, 0]]: token a (z_1 = (3, 4), z_2 = (1, 1)) gets ||W_1 z_1|| = 5 and
    ||W_2 z_2|| = ||(3, 0)|| = 3; token b (z_1 = (0, 1), z_2 = (0, 2)) gets 1 and 6; means 3 and 4.5.
    The bias is no layer's, and a row without a label (a later subword) is not a token."""
    hidden = np.array([[[3, 4], [1, 1]], [[100, 100], [100, 100]], [[0, 1], [0, 2]]], dtype=np.float16)
    split = SplitArrays("dev", hidden, np.array([1, IGNORE, 0]), np.array([0, 2, 3]), (5, 7), np.array([0, 1]))
    tagger = TokenTagger(fusion="concat", n_layers=2, dim=2, num_heads=1, ffn_dim=4, n_labels=2).eval()
    with torch.no_grad():
        tagger.fusion.proj.weight.copy_(torch.tensor([[1.0, 0, 0, 3], [0, 1, 0, 0]]))
        tagger.fusion.proj.bias.fill_(10.0)
    usage = _usage(tagger, split)
    assert usage["layers"] == [5, 7]
    assert usage["contribution"] == pytest.approx([3.0, 4.5], rel=1e-6)
    assert usage["share"] == pytest.approx([0.4, 0.6], rel=1e-6)
    assert usage["block_norm"] == pytest.approx([math.sqrt(2), 3.0], rel=1e-6)
    assert describe(usage) == "layers used (share): 5:0.40 7:0.60"


def test_heads_on_the_top_layer_report_nothing():
    for fusion in ("base", "extra"):
        assert _usage(_tagger(fusion), _split()) is None
    assert describe(None) == "layers used: the top layer only"
    assert describe(None, z_layer=1) == "layers used: layer 1 only"  # --layers xie picked layer 1: not the top
