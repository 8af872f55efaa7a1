"""Hidden states computed on the fly by the backbone, in exactly the layout of the cache: the same
tokenization, windows and word pooling as `extract` (the same code), so a head sees the same
inputs live as from the cache. Used by FT mode (with gradients) and by `predict`."""

from __future__ import annotations

import numpy as np
import torch

from ..errors import LayercacheError


class LiveBackbone(torch.nn.Module):
    def __init__(self, model, tokenizer, *, granularity: str, pooling: str, max_length: int, device,
                 precision: str = "fp32"):
        super().__init__()
        from ..extract.encode import UnitEncoder

        self.model, self.tokenizer = model, tokenizer
        self.granularity, self.pooling = granularity, pooling
        # One forward per batch of sentences: the budget only has to cover the longest batches.
        self.encoder = UnitEncoder(model, tokenizer, device=device, precision=precision,
                                   token_budget=1 << 20, max_length=max_length)

    @property
    def device(self):
        return self.encoder.device

    def forward(self, sentences: list[list[str]], layers: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden [B, T, len(layers), d] float32, mask [B, T] bool) for the sentences' rows."""
        from ..extract.encode import row_map
        from ..extract.tokenize import tokenize_words

        tok = tokenize_words(self.tokenizer, sentences)
        rows = row_map(tok, granularity=self.granularity, pooling=self.pooling)
        n_rows = int(rows.row_offsets[-1])
        flat = self.encoder.encode_unit(tok, rows, 0, n_rows, storage=torch.float32,
                                        grad=torch.is_grad_enabled())  # [rows, L+1, d]
        flat = flat[:, list(layers)]  # [rows, L, d]
        lengths = torch.as_tensor(np.diff(rows.row_offsets), device=flat.device)
        T = int(lengths.max()) if len(lengths) else 0
        steps = torch.arange(T, device=flat.device)
        mask = steps[None, :] < lengths[:, None]  # [B, T]
        starts = torch.as_tensor(rows.row_offsets[:-1], device=flat.device)
        index = torch.where(mask, starts[:, None] + steps[None, :], 0)  # [B, T]
        hidden = flat[index] * mask[:, :, None, None]  # [B, T, L, d], zeros at padding
        return hidden, mask


def load_live_backbone(meta: dict, *, device, precision: str = "fp32", model_path: str | None = None,
                       trust_remote_code: bool = False) -> LiveBackbone:
    """The backbone a cache entry (or checkpoint) was made with, checked against its revision."""
    from ..extract.models import load_model, load_tokenizer, model_info

    info = model_info(model_path or meta["model"], trust_remote_code=trust_remote_code)
    if model_path is None and meta.get("model_revision") and info.revision != meta["model_revision"]:
        raise LayercacheError(
            f"model {meta['model']} now has revision {info.revision}, but the cache was made with "
            f"{meta['model_revision']}; its hidden states would not match"
        )
    if info.hidden_size != int(meta["hidden_size"]) or info.num_layers != int(meta["num_layers"]):
        raise LayercacheError(
            f"model {info.name} has {info.num_layers} layers of width {info.hidden_size}, the head expects "
            f"{meta['num_layers']} of width {meta['hidden_size']}"
        )
    tokenizer = load_tokenizer(info, trust_remote_code=trust_remote_code)
    model = load_model(info, device=device, trust_remote_code=trust_remote_code)
    return LiveBackbone(model, tokenizer, granularity=meta.get("granularity", "word"),
                        pooling=meta.get("pooling", "first") if meta.get("pooling") != "none" else "first",
                        max_length=int(meta.get("max_length") or info.max_length), device=device,
                        precision=meta.get("precision", precision))
