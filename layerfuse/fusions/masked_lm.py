"""Masked language modelling on fused layers: a fusion head, then a BERT-style LM head whose
decoder is tied to the backbone's input embeddings.

Only the rows asked for (the masked ones) reach the vocabulary product, since ``[rows, vocab]`` is
the one big tensor of the task (30k columns against a few hundred hidden units).
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layerfuse.errors import LayerfuseError

from .config import LM_HIDDEN_ACT, LM_LAYER_NORM_EPS, FusionConfig
from .registry import FUSIONS, build_fusion

# The transform's activation by the HF config's ``hidden_act`` name. BERT's MLM head uses
# ``hidden_act``; RoBERTa's and MPNet's always use exact gelu (their configs say "gelu" too).
ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}
PRETRAINED = ("dense_weight", "dense_bias", "norm_weight", "norm_bias", "decoder_bias")  # the cache's lm/* arrays


class MaskedLMHead(nn.Module):
    """``logits = LN(act(W h + b)) E^T + c``: BERT's ``cls.predictions`` (RoBERTa's and MPNet's
    ``lm_head``), ``[R, d] -> [R, vocab]``.

    ``E`` is the backbone's input word-embedding matrix, never a weight of this head: FE holds a
    frozen copy (`freeze_to`, a non-persistent buffer), FT points at the backbone's own parameter
    (`tie`). Either way the head's state_dict and parameter count are the transform and ``c``
    alone, so a checkpoint stays small and is re-tied to whichever backbone loads it.
    """

    def __init__(self, *, dim: int, vocab_size: int, layer_norm_eps: float = LM_LAYER_NORM_EPS,
                 hidden_act: str = LM_HIDDEN_ACT) -> None:
        super().__init__()
        if hidden_act not in ACTIVATIONS:
            raise LayerfuseError(f"hidden_act {hidden_act!r} is not one of {', '.join(ACTIVATIONS)}")
        if vocab_size < 1:
            raise LayerfuseError(f"vocab_size must be >= 1, got {vocab_size!r}")
        self.vocab_size, self.hidden_act = vocab_size, hidden_act
        self.dense = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))  # c
        self.register_buffer("embeddings", None, persistent=False)  # E in FE: frozen, not saved
        self._tied: tuple = ()  # E in FT: (the backbone's parameter,), a tuple so nn.Module does not register it

    def freeze_to(self, embeddings: Tensor) -> "MaskedLMHead":
        """FE: decode with a fixed copy of ``embeddings [vocab, d]`` (moved by ``.to()``, not trained)."""
        self._check(embeddings)
        self._tied = ()
        self.embeddings = embeddings.detach().requires_grad_(False)
        return self

    def tie(self, weight: nn.Parameter) -> "MaskedLMHead":
        """FT: decode with the backbone's input-embedding parameter itself (same storage), so the
        gradients of both uses meet in one tensor, as in the pretrained model."""
        self._check(weight)
        self.embeddings = None
        self._tied = (weight,)
        return self

    @property
    def decoder_weight(self) -> Tensor:
        if self._tied:
            return self._tied[0]
        if self.embeddings is None:
            raise LayerfuseError("the LM head's decoder is not tied to any embeddings yet: call freeze_to() or tie()")
        return self.embeddings

    def load_pretrained(self, weights: dict) -> bool:
        """Start from the backbone's own MLM head (the cache's ``lm/*`` arrays, as numpy or torch)
        when it has one; returns whether it did. Without one the transform keeps its fresh init."""
        if not all(k in weights for k in PRETRAINED):
            return False
        with torch.no_grad():
            for name, target in zip(PRETRAINED, (self.dense.weight, self.dense.bias, self.norm.weight,
                                                 self.norm.bias, self.bias)):
                value = torch.as_tensor(weights[name], dtype=target.dtype)
                if value.shape != target.shape:
                    raise LayerfuseError(f"lm/{name} has shape {tuple(value.shape)}, "
                                          f"the head expects {tuple(target.shape)}")
                target.copy_(value)
        return True

    def forward(self, h: Tensor) -> Tensor:
        # h [R, d] -> [R, vocab]
        x = self.norm(ACTIVATIONS[self.hidden_act](self.dense(h)))  # [R, d]
        weight = self.decoder_weight
        return F.linear(x, weight.to(x.dtype) if weight.dtype != x.dtype else weight, self.bias.to(x.dtype))

    def _check(self, weight: Tensor) -> None:
        expected = (self.vocab_size, self.dense.in_features)
        if tuple(weight.shape) != expected:
            raise LayerfuseError(f"embeddings of shape {tuple(weight.shape)} "
                                  f"do not fit the LM head's {list(expected)}")


class FusedMaskedLM(nn.Module):
    """``logits = MaskedLMHead(fusion(hidden, mask))`` at the rows asked for: ``[B, T, L, d] -> [R, vocab]``.

    No dropout between the fusion and the LM head: the pretrained model has none there, so the
    base fusion with the backbone's own head is exactly the pretrained MLM (the reference line).
    """

    def __init__(self, *, fusion: str, vocab_size: int, layer_norm_eps: float = LM_LAYER_NORM_EPS,
                 hidden_act: str = LM_HIDDEN_ACT, **fusion_config) -> None:
        super().__init__()
        config = FusionConfig(**fusion_config)  # the fields as keywords, as `TokenTagger` takes them
        self.n_layers, self.dim = config.n_layers, config.dim
        self.fusion = build_fusion(fusion, config)
        self.lm = MaskedLMHead(dim=config.dim, vocab_size=vocab_size, layer_norm_eps=layer_norm_eps,
                               hidden_act=hidden_act)

    def forward(self, hidden: Tensor, mask: Tensor, lengths: Tensor | None = None, *,
                rows: Tensor | None = None) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (True = real row); rows [B, T] bool: where to predict
        # (None = every real row); lengths: a packed batch's blocks. -> logits [R, vocab], R = rows.sum()
        if hidden.dim() != 4 or tuple(hidden.shape[2:]) != (self.n_layers + self.fusion.query_slices, self.dim):
            raise LayerfuseError(f"hidden states of shape {tuple(hidden.shape)} do not match the head's "
                                  f"[B, T, n_layers={self.n_layers}, dim={self.dim}]")
        rows = mask if rows is None else rows
        if self.fusion.token_wise:  # a row's output needs that row alone: fuse only the R rows
            picked = hidden[rows][None]  # [1, R, L, d]
            h = self.fusion(picked, torch.ones(picked.shape[:2], dtype=torch.bool, device=hidden.device))[0]
        elif lengths is not None:
            h = self.fusion.forward_packed(hidden, lengths)[rows]  # [R, d]
        else:
            h = self.fusion(hidden, mask)[rows]  # [R, d]
        return self.lm(h)  # [R, vocab]


def masked_lm_budget(*, n_layers: int, dim: int, num_heads: int, ffn_dim: int, vocab_size: int,
                     **options) -> dict[str, int]:
    """Trainable parameters of a `FusedMaskedLM` (fusion + transform + decoder bias; the tied
    embeddings are the backbone's) for every fusion, each with its own settings from ``options``,
    built on the meta device."""
    from .tagger import count_parameters

    budget = {}
    for fusion in FUSIONS:
        with torch.device("meta"):
            budget[fusion] = count_parameters(FusedMaskedLM(fusion=fusion, n_layers=n_layers, dim=dim,
                                                            num_heads=num_heads,
                                                            ffn_dim=ffn_dim, vocab_size=vocab_size, **options))
    return budget
