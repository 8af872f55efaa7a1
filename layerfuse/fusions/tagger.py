"""A token tagger: a fusion head, dropout and a linear classifier; plus parameter budgets."""

import torch
from torch import Tensor, nn

from layerfuse.errors import LayerfuseError

from .config import FusionConfig
from .dropout import Dropout
from .registry import FUSIONS, build_fusion


def packable(tagger: "TokenTagger") -> bool:
    """Whether the head trains on packed batches, as its fusion declares (`Fusion.trains_packed`)."""
    return tagger.fusion.trains_packed()


class TokenTagger(nn.Module):
    """``logits = Linear(dropout(fusion(hidden, mask)))``: ``[B, T, L, d] -> [B, T, n_labels]``.

    ``fusion_config``: the `FusionConfig` fields as keywords (``n_layers``, ``dim``, ``num_heads``,
    ``ffn_dim``, and optionally ``dropout``, ``query_layer`` and the fusions' own settings), so a
    checkpoint's flat ``tagger`` record rebuilds the head.
    """

    def __init__(self, *, fusion: str, n_labels: int, **fusion_config) -> None:
        super().__init__()
        if n_labels < 1:
            raise LayerfuseError(f"n_labels must be >= 1, got {n_labels!r}")
        config = FusionConfig(**fusion_config)
        self.n_layers, self.dim = config.n_layers, config.dim
        self.fusion = build_fusion(fusion, config)
        self.dropout = Dropout(config.dropout)
        self.classifier = nn.Linear(config.dim, n_labels)

    def forward(self, hidden: Tensor, mask: Tensor, lengths: Tensor | None = None) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (True = real token); lengths: a packed batch's sentences
        slices = self.n_layers + self.fusion.query_slices  # the fused layers, then z_L when it is read apart
        if hidden.dim() != 4 or tuple(hidden.shape[2:]) != (slices, self.dim):
            raise LayerfuseError(
                f"hidden states of shape {tuple(hidden.shape)} do not match the head's "
                f"[B, T, n_layers={self.n_layers}{' + z_L' if self.fusion.query_slices else ''}, dim={self.dim}]"
            )
        if lengths is not None and not self.fusion.token_wise:
            h = self.fusion.forward_packed(hidden, lengths)  # [1, R, d]
        else:
            h = self.fusion(hidden, mask)  # [B, T, d]
        return self.classifier(self.dropout(h))  # [B, T, n_labels]


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters (buffers such as DWAtt's ``k_pos`` are not counted)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def parameter_budget(
    *,
    n_layers: int,
    dim: int,
    num_heads: int,
    ffn_dim: int,
    n_labels: int,
    **options,
) -> dict[str, int]:
    """Trainable parameters of a ``TokenTagger`` (fusion + classifier) for every fusion, each with its
    own settings from ``options`` (by name; left out: the default).

    Built on the meta device, so no weights are allocated and no RNG state is consumed.
    """
    shape = dict(n_layers=n_layers, dim=dim, num_heads=num_heads, ffn_dim=ffn_dim, n_labels=n_labels, **options)
    budget = {}
    for fusion in FUSIONS:
        with torch.device("meta"):
            budget[fusion] = count_parameters(TokenTagger(fusion=fusion, **shape))
    return budget
