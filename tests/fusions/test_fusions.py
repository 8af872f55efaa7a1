"""Each fusion head against a hand-written reference of its formula; masks, budgets, seeding."""

import math

import pytest
import torch
from torch import nn

from layerfuse.errors import LayerfuseError
from layerfuse.fusions import (
    FUSIONS,
    Base,
    Concat,
    DWAtt,
    ExtraLayers,
    FusionConfig,
    ScalarMix,
    TokenTagger,
    count_parameters,
    parameter_budget,
)
from layerfuse.fusions.dwatt import LAYER_SCORE

B, T, L, D = 2, 5, 4, 8
SMALL = dict(n_layers=L, dim=D, num_heads=2, ffn_dim=16, extra_layers=2, dropout=0.1)
# roberta-large with CoNLL-2003 IOB2 tags, and the paper's Table 2 counts for it.
ROBERTA_LARGE = dict(n_layers=24, dim=1024, num_heads=16, ffn_dim=4096, n_labels=9, extra_layers=2)
TABLE_2 = {"concat": 25.18e6, "dwatt": 26.38e6, "extra": 25.19e6}


def inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, L, D, generator=gen, dtype=torch.float64)  # [B, T, L, d]
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 3:] = False  # second sentence has 3 real tokens
    return hidden, mask


def make(cls: type[nn.Module], **options) -> nn.Module:
    """``cls`` built as the tagger builds it: from the `FusionConfig` fields it declares."""
    return cls(**FusionConfig(**{**SMALL, **options}).arguments_for(cls))


def build(cls: type[nn.Module], seed: int = 0, **options) -> nn.Module:
    """A head in eval mode, float64, every parameter randomised (so LN affines are not trivial)."""
    torch.manual_seed(seed)
    module = make(cls, **options).double().eval()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return module


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * weight + bias


def gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def test_base_is_top_layer():
    hidden, mask = inputs()
    head = build(Base)
    assert count_parameters(head) == 0
    torch.testing.assert_close(head(hidden, mask), hidden[:, :, L - 1])


def test_concat_is_sum_of_per_layer_maps():
    hidden, mask = inputs()
    head = build(Concat)
    weight, bias = head.proj.weight, head.proj.bias  # [d, L*d], [d]
    expected = bias.expand(B, T, D).clone()
    for n in range(L):
        w_n = weight[:, n * D : (n + 1) * D]  # W_n, [d, d]
        expected += hidden[:, :, n] @ w_n.T
    torch.testing.assert_close(head(hidden, mask), expected)


def test_scalarmix_is_softmax_weighted_sum():
    hidden, mask = inputs()
    head = build(ScalarMix)
    w = head.weights.tolist()
    denom = sum(math.exp(x) for x in w)
    expected = sum(math.exp(w[n]) / denom * hidden[:, :, n] for n in range(L)) * head.gamma
    torch.testing.assert_close(head(hidden, mask), expected)


def test_scalarmix_starts_as_mean():
    hidden, mask = inputs()
    head = make(ScalarMix).double()
    torch.testing.assert_close(head(hidden, mask), hidden.mean(dim=2))


@pytest.mark.parametrize("layer_score", ["paper", "scaled", "learned"])
def test_dwatt_matches_equations(layer_score):
    hidden, mask = inputs()
    head = build(DWAtt, layer_score=layer_score)
    scale = {"paper": 1.0, "scaled": D ** -0.5}.get(layer_score)
    if layer_score == "learned":
        scale = float(torch.exp(head.log_temperature.detach()))  # randomised by build(): not the initial 1/sqrt(d)

    def mlp(x, up_w, up_b, mid_w, mid_b, down_w, down_b):  # f(x) = W LN(gelu(U x)); U as [d, m]
        return layer_norm(gelu(x @ up_w + up_b), mid_w, mid_b) @ down_w + down_b

    q_mlp = head.query_mlp
    top = hidden[:, :, L - 1]  # z_L
    f_q = mlp(
        top,
        q_mlp.up.weight.T, q_mlp.up.bias,
        q_mlp.norm.weight, q_mlp.norm.bias,
        q_mlp.down.weight.T, q_mlp.down.bias,
    )
    x = top + f_q
    query = 1 + torch.where(x > 0, x, torch.exp(x) - 1)  # 1 + elu
    scores, values = [], []
    for n in range(L):
        k_n = head.key.weight @ head.k_pos[n] + head.key.bias  # W^K k^pos_n, [d]
        scores.append((query * k_n).sum(-1) * scale)  # s(q, k_n), [B, T]
        f_v = mlp(
            hidden[:, :, n],
            head.v_up_weight[n], head.v_up_bias[n],
            head.v_mid_norm_weight[n], head.v_mid_norm_bias[n],
            head.v_down_weight[n], head.v_down_bias[n],
        )
        values.append(layer_norm(f_v, head.v_norm_weight[n], head.v_norm_bias[n]))  # v_n
    exp = [torch.exp(s - torch.stack(scores).max(0).values) for s in scores]
    total = sum(exp)
    expected = top + sum(e[..., None] / total[..., None] * v for e, v in zip(exp, values))
    torch.testing.assert_close(head(hidden, mask), expected)


def test_dwatt_learned_temperature_starts_at_the_scaled_score():
    head = make(DWAtt, layer_score="learned")
    assert float(torch.exp(head.log_temperature.detach())) == pytest.approx(D ** -0.5)
    scores = torch.randn(2, 3, L)
    torch.testing.assert_close(head.scale(scores), make(DWAtt).scale(scores))
    with pytest.raises(LayerfuseError, match="layer_score.*'cosine'"):
        make(DWAtt, layer_score="cosine")


def test_dwatt_under_bf16_autocast_follows_float32_and_trains_float32_weights():
    """Under autocast the value path runs in bfloat16 with the parameters cast once; the output
    stays within bfloat16 rounding of the float32 head, and the gradients reach the float32 weights."""
    torch.manual_seed(0)
    head = make(DWAtt, dim=32, ffn_dim=64).train()
    hidden = torch.randn(3, 7, L, 32)
    mask = torch.ones(3, 7, dtype=torch.bool)
    with torch.no_grad():
        exact = head(hidden, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = head(hidden, mask)
    assert out.dtype == torch.float32  # z_L + bfloat16 values: the residual keeps float32
    assert (out - exact).abs().max() < 0.05 * exact.abs().max()
    assert (out - exact).abs().max() > 0  # it did run in bfloat16
    out.sum().backward()
    for name, p in head.named_parameters():
        assert p.grad is not None and p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_dwatt_parameter_count_equals_per_layer_modules():
    m = D // 2

    def mlp() -> list[nn.Module]:
        return [nn.Linear(D, m), nn.LayerNorm(m), nn.Linear(m, D)]

    per_layer = [mod for _ in range(L) for mod in [*mlp(), nn.LayerNorm(D)]]  # f^V_n and LN_n
    reference = nn.ModuleList([*per_layer, *mlp(), nn.Linear(24, D)])  # + f^Q and W^K
    assert count_parameters(make(DWAtt)) == count_parameters(reference)


def test_dwatt_k_pos_is_a_fixed_saved_buffer():
    head = make(DWAtt)
    assert head.k_pos.shape == (L, 24)
    assert not head.k_pos.requires_grad
    assert all(p is not head.k_pos for p in head.parameters())
    assert "k_pos" in head.state_dict()
    assert 0 <= head.k_pos.min() and head.k_pos.max() < 1
    # a checkpoint reproduces it, whatever the RNG does when the new head is built
    torch.manual_seed(123)
    other = make(DWAtt)
    other.load_state_dict(head.state_dict())
    torch.testing.assert_close(other.k_pos, head.k_pos)


def multi_head_attention(x, attn, key_padding):
    """Reference self-attention with the module's packed in/out projections; x [B, T, d]."""
    heads, head_dim = attn.num_heads, D // attn.num_heads
    q, k, v = (x @ attn.in_proj_weight.T + attn.in_proj_bias).chunk(3, dim=-1)
    out = torch.zeros_like(x)
    for h in range(heads):
        sl = slice(h * head_dim, (h + 1) * head_dim)
        scores = q[..., sl] @ k[..., sl].transpose(1, 2) / math.sqrt(head_dim)  # [B, T, T]
        scores = scores.masked_fill(key_padding[:, None, :], float("-inf"))
        out[..., sl] = torch.softmax(scores, dim=-1) @ v[..., sl]
    return out @ attn.out_proj.weight.T + attn.out_proj.bias


def test_extra_layers_match_post_ln_transformer():
    hidden, mask = inputs()
    head = build(ExtraLayers)
    assert len(head.layers) == 2
    x = hidden[:, :, L - 1]
    for layer in head.layers:  # post-LN: x = LN1(x + SA(x)); x = LN2(x + FFN(x))
        attended = x + multi_head_attention(x, layer.self_attn, ~mask)
        x = layer_norm(attended, layer.norm1.weight, layer.norm1.bias)
        inner = gelu(x @ layer.linear1.weight.T + layer.linear1.bias)
        ffn = inner @ layer.linear2.weight.T + layer.linear2.bias
        x = layer_norm(x + ffn, layer.norm2.weight, layer.norm2.bias)
    torch.testing.assert_close(head(hidden, mask)[mask], x[mask])


@pytest.mark.parametrize("train", [False, True])
def test_extra_layers_ignore_padded_positions(train):
    hidden, mask = inputs()
    head = build(ExtraLayers).train(train)
    changed = hidden.clone()
    changed[~mask] = torch.randn_like(changed[~mask]) * 100
    torch.manual_seed(0)  # same dropout draws in train mode
    before = head(hidden, mask)[mask]
    torch.manual_seed(0)
    after = head(changed, mask)[mask]
    torch.testing.assert_close(before, after)


def test_extra_layers_default_and_all_padding_sentence():
    assert len(make(ExtraLayers, extra_layers=None).layers) == 1  # a backbone of unknown depth: 12 layers
    hidden, mask = inputs()
    mask[0] = False  # a sentence with no real token must not produce NaN for the batch
    out = build(ExtraLayers)(hidden, mask)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("fusion", sorted(FUSIONS))
def test_tagger_is_fusion_then_classifier(fusion):
    hidden, mask = inputs()
    torch.manual_seed(0)
    tagger = TokenTagger(fusion=fusion, n_labels=3, **SMALL).double().eval()
    logits = tagger(hidden, mask)
    assert logits.shape == (B, T, 3)
    torch.testing.assert_close(logits, tagger.classifier(tagger.fusion(hidden, mask)))
    # every trainable parameter gets a gradient
    tagger.train()
    tagger(hidden, mask)[mask].sum().backward()
    assert all(p.grad is not None for p in tagger.parameters())


@pytest.mark.parametrize("fusion", sorted(FUSIONS))
def test_seed_makes_construction_deterministic(fusion):
    def state() -> dict[str, torch.Tensor]:
        torch.manual_seed(7)
        return TokenTagger(fusion=fusion, n_labels=3, **SMALL).state_dict()

    first, second = state(), state()
    assert first.keys() == second.keys()
    for name in first:
        torch.testing.assert_close(first[name], second[name], rtol=0, atol=0)


def test_unknown_fusion_names_value_and_choices():
    with pytest.raises(LayerfuseError, match="'nope'.*concat.*dwatt"):
        TokenTagger(fusion="nope", n_labels=3, **SMALL)


def test_tagger_rejects_wrong_shape():
    tagger = TokenTagger(fusion="concat", n_labels=3, **SMALL)
    with pytest.raises(LayerfuseError, match="n_layers=4"):
        tagger(torch.zeros(B, T, L + 1, D), torch.ones(B, T, dtype=torch.bool))


def test_extra_layers_rejects_bad_heads():
    with pytest.raises(LayerfuseError, match="num_heads=3"):
        make(ExtraLayers, num_heads=3)


def test_roberta_large_budget_matches_table_2():
    budget = parameter_budget(**ROBERTA_LARGE)
    assert set(budget) == set(FUSIONS)
    for fusion, paper in TABLE_2.items():
        assert abs(budget[fusion] - paper) / paper < 0.02, (fusion, budget[fusion], paper)
    # exact counts (classifier 1024*9 + 9 = 9225 included)
    assert budget == {
        "base": 9_225,
        "concat": 25_176_073,
        "dwatt": 26_362_377,
        "extra": 25_201_673,
        "scalarmix": 9_250,
    }


@pytest.mark.parametrize("fusion", ["base", "concat", "dwatt", "scalarmix"])
def test_token_wise_heads_give_the_same_outputs_packed(fusion):
    """Packing a batch's rows into one sequence (no padding) changes nothing for token-wise heads."""
    from layerfuse.fusions import TokenTagger

    torch.manual_seed(0)
    tagger = TokenTagger(fusion=fusion, n_layers=3, dim=8, num_heads=2, ffn_dim=16, n_labels=5).eval()
    assert tagger.fusion.token_wise
    lengths = [4, 2, 3]
    x = torch.randn(3, 4, 3, 8)
    mask = torch.arange(4)[None, :] < torch.tensor(lengths)[:, None]
    padded = tagger(x, mask)[mask]  # [rows, n_labels]
    packed = tagger(x[mask][None], torch.ones(1, int(mask.sum()), dtype=torch.bool))[0]
    torch.testing.assert_close(packed, padded)


def packed_batch(lengths, total_rows, seed=0):
    """Padded hidden states [B, T, L, d] of sentences of ``lengths`` and the same rows packed into
    one ``[1, total_rows, L, d]`` sequence (zero rows after them), as `SplitArrays.batch` builds."""
    gen = torch.Generator().manual_seed(seed)
    T = max(lengths)
    hidden = torch.randn(len(lengths), T, L, D, generator=gen, dtype=torch.float64)
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    rows = hidden[mask]
    packed = torch.cat([rows, rows.new_zeros(total_rows - len(rows), L, D)])[None]
    return hidden, mask, packed


@pytest.mark.parametrize("lengths", [[5, 2, 3], [1], [9, 0, 17, 4, 8, 33, 2]])
def test_extra_layers_packed_equal_padded(lengths):
    """Packed rows with attention per group of similar lengths give the padded forward's outputs,
    zero-length sentences and trailing padding rows included."""
    head = build(ExtraLayers)
    hidden, mask, packed = packed_batch(lengths, total_rows=sum(lengths) + 7)
    out = head.forward_packed(packed, torch.tensor(lengths))[0]  # [R, d]
    assert out.shape == (sum(lengths) + 7, D)
    torch.testing.assert_close(out[: sum(lengths)], head(hidden, mask)[mask])


def test_extra_layers_packed_trains_and_ignores_other_sentences():
    """In training mode (dropout on), a sentence's outputs depend on its own rows only."""
    head = build(ExtraLayers).train()
    lengths = torch.tensor([3, 6])
    _, _, packed = packed_batch([3, 6], total_rows=12)
    changed = packed.clone()
    changed[0, 3:] = torch.randn_like(changed[0, 3:]) * 100  # the second sentence and the padding
    torch.manual_seed(0)
    before = head.forward_packed(packed, lengths)[0, :3]
    torch.manual_seed(0)
    after = head.forward_packed(changed, lengths)[0, :3]
    torch.testing.assert_close(before, after)
    before.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in head.parameters())


def test_tagger_uses_the_packed_path_of_extra_layers():
    torch.manual_seed(0)
    tagger = TokenTagger(fusion="extra", n_layers=3, dim=8, num_heads=2, ffn_dim=16, n_labels=5).eval()
    lengths = [4, 2, 3]
    x = torch.randn(3, 4, 3, 8)
    mask = torch.arange(4)[None, :] < torch.tensor(lengths)[:, None]
    packed = torch.cat([x[mask], torch.zeros(3, 3, 8)])[None]  # 9 rows + 3 padding rows
    out = tagger(packed, torch.arange(12)[None] < 9, torch.tensor(lengths))[0, :9]
    torch.testing.assert_close(out, tagger(x, mask)[mask])


@pytest.mark.parametrize("fusion", sorted(FUSIONS))
def test_fusions_declare_only_config_fields_and_no_defaults(fusion):
    """Each fusion takes only the `FusionConfig` fields it uses and its own settings, with no defaults
    of its own: the defaults are the config's and the settings' declarations alone."""
    import dataclasses
    import inspect

    names = {f.name for f in dataclasses.fields(FusionConfig)} | {o.name for o in FUSIONS[fusion].options}
    params = inspect.signature(FUSIONS[fusion]).parameters.values()
    assert {p.name for p in params} <= names
    assert all(p.default is inspect.Parameter.empty for p in params)


def test_tagger_defaults_are_the_fusion_configs():
    tagger = TokenTagger(fusion="extra", n_labels=3, n_layers=L, dim=D, num_heads=2, ffn_dim=16)
    assert tagger.dropout.p == FusionConfig.dropout
    assert len(tagger.fusion.layers) == 1  # the extra layers' default on a backbone of unknown depth
    assert make(DWAtt).layer_score == LAYER_SCORE.default == "scaled"
