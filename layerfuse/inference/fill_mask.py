"""Filling masks with a trained MLM head and its backbone: text with [MASK] (or <mask>) in, the
most likely tokens at each mask out."""

from __future__ import annotations

import re

from ..errors import LayerfuseError
from ..tasks import task_of
from .predictor import load_head

MASK_SPELLINGS = re.compile(r"\[MASK\]|<mask>")  # BERT's and RoBERTa's/MPNet's, whichever the tokenizer uses


class MaskFiller:
    """An MLM checkpoint with its decoder tied to the backbone's input embeddings (for an FT head,
    the fine-tuned backbone's), as during training."""

    def __init__(self, checkpoint: str, *, device=None, model: str | None = None):
        self.head, self.meta, self.backbone, self.device = load_head(checkpoint, device=device, model=model)
        if not task_of(self.meta).masks_inputs:
            raise LayerfuseError(f"{checkpoint} is a NER head; --fill-mask needs an MLM head (train-head --task mlm)")
        self.head.lm.tie(self.backbone.model.get_input_embeddings().weight)
        self.tokenizer = self.backbone.tokenizer
        self.layers = self.meta["layers"]

    def fill(self, text: str, *, top_k: int = 5) -> list[dict]:
        """One entry per mask, left to right: {"index": its token position, "top": [{"token", "id",
        "probability"}, ...] best first}."""
        import torch

        ids = self.encode(text)
        positions = [i for i, t in enumerate(ids) if t == self.tokenizer.mask_token_id]
        if not positions:
            raise LayerfuseError(f"no mask in {text!r}: write [MASK] (or <mask>) where a token should be predicted")
        with torch.inference_mode():
            hidden, mask = self.backbone.encode_ids([ids], self.layers)  # [1, T, L, d], as the cache's rows
            rows = torch.zeros_like(mask)
            rows[0, positions] = True
            probs = torch.softmax(self.head(hidden, mask, rows=rows).float(), dim=-1)  # [masks, vocab]
            top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
        out = []
        for position, p, i in zip(positions, top.values.tolist(), top.indices.tolist()):
            tokens = self.tokenizer.convert_ids_to_tokens(i)
            out.append({"index": position, "top": [{"token": t, "id": k, "probability": q}
                                                   for t, k, q in zip(tokens, i, p)]})
        return out

    def encode(self, text: str) -> list[int]:
        """The content token ids of ``text`` (no special tokens: rows are content tokens, as in the cache)."""
        if self.tokenizer.mask_token is None:
            raise LayerfuseError(f"the tokenizer of {self.meta['cache'].get('model')} has no mask token")
        ids = self.tokenizer(MASK_SPELLINGS.sub(self.tokenizer.mask_token, text), add_special_tokens=False)["input_ids"]
        longest = self.backbone.encoder.width
        if len(ids) > longest:
            raise LayerfuseError(f"{text[:40]!r}... is {len(ids)} tokens; the backbone takes at most {longest}")
        return ids
