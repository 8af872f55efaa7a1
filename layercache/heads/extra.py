"""Extra-layers fusion (R+n): new transformer encoder layers on top of the last layer."""

from torch import Tensor, nn

from layercache.errors import LayercacheError


class ExtraLayers(nn.Module):
    """``h = Enc_n(... Enc_1(z_L))``: ``extra_layers`` fresh post-LN encoder layers.

    Each layer has the backbone's width ``d``, ``num_heads`` heads and FFN size ``ffn_dim`` (GELU),
    and attends over the sentence's positions; padded positions are masked as keys. The caller picks
    ``extra_layers`` (the paper: 1 for 12-layer, 2 for 24-layer backbones), since the head only sees
    the selected layers; ``None`` means 1.
    """

    token_wise = False  # attends across the sentence: batches stay padded per sentence

    def __init__(
        self,
        *,
        n_layers: int,
        dim: int,
        num_heads: int,
        ffn_dim: int,
        extra_layers: int | None = None,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        n_extra = 1 if extra_layers is None else extra_layers
        if n_extra < 1:
            raise LayercacheError(f"extra_layers must be >= 1, got {extra_layers!r}")
        if num_heads < 1 or dim % num_heads != 0:
            raise LayercacheError(f"num_heads={num_heads!r} must be >= 1 and divide dim={dim!r}")
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                dim,
                num_heads,
                ffn_dim,
                dropout,
                activation="gelu",
                batch_first=True,
                norm_first=False,
            )
            for _ in range(n_extra)
        )

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (True = real token)
        h = hidden[:, :, -1]  # [B, T, d]
        # A sentence with no real token would softmax over nothing (NaN); let it attend everywhere
        # instead: its outputs are padding and ignored anyway.
        padding = ~mask & mask.any(dim=1, keepdim=True)  # [B, T], True = ignore as key
        for layer in self.layers:
            h = layer(h, src_key_padding_mask=padding)  # [B, T, d]
        return h
