"""Hidden states computed on the fly by the backbone, in exactly the layout of the cache: the same
tokenization, windows and word pooling as `extract` (the same code), so a head sees the same
inputs live as from the cache. Used by FT mode (with gradients) and by `predict`."""

from __future__ import annotations

import os

import numpy as np
import torch

from ..errors import LayerfuseError
from ..precision import DEFAULT_PRECISION
from .freeze import freeze

# Live batches padded to a multiple of this many tokens, by device type. On a GPU, the first batch
# of each new shape costs a bf16 FT step about 0.2 s of kernel choice on the host (an H100: 321 ms
# a step on new lengths, 110 ms on lengths seen, docs/results/bench_ft_step_gpu_roberta_bf16_new_shapes.md),
# and padding costs next to nothing; on a CPU, padding costs arithmetic and a new shape nothing.
LIVE_PAD_MULTIPLE = {"cuda": 32}

# Tokens a forward pass of FT takes: one forward per batch of sentences (the budget only has to cover the
# longest batches). `predict` passes extraction's budget instead, so a long text is encoded a few windows
# at a time.
ONE_FORWARD = 1 << 20


class LiveBackbone(torch.nn.Module):
    def __init__(self, model, tokenizer, *, granularity: str, pooling: str, max_length: int, device,
                 precision: str = DEFAULT_PRECISION, token_budget: int = ONE_FORWARD):
        super().__init__()
        from ..extract.encode import UnitEncoder

        self.model, self.tokenizer = model, tokenizer
        self.granularity, self.pooling = granularity, pooling
        self.encoder = UnitEncoder(model, tokenizer, device=device, precision=precision,
                                   token_budget=token_budget, max_length=max_length,
                                   pad_to_multiple=LIVE_PAD_MULTIPLE.get(torch.device(device).type, 1))
        self._pretrained: dict | None = None  # the weights every FT run starts from (`reset`)

    @property
    def device(self):
        return self.encoder.device

    def forward(self, sentences: list[list[str]] | None, layers: list[int], *,
                tokens=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden [B, T, len(layers), d] float32, mask [B, T] bool) for the sentences' rows; given
        ``tokens`` (their `Tokenized`, e.g. a slice of a split tokenized once), nothing is tokenized."""
        from ..extract.tokenize import tokenize_words

        tok = tokens if tokens is not None else tokenize_words(self.tokenizer, sentences)
        rows = self.row_map(tok)
        flat = self.encode_rows(tok, rows, 0, int(rows.row_offsets[-1]), layers)  # [rows, L, d]
        sizes = np.diff(rows.row_offsets)  # each sentence's rows, known on the host: no wait for the device
        lengths = torch.as_tensor(sizes, device=flat.device)
        T = int(sizes.max()) if len(sizes) else 0
        steps = torch.arange(T, device=flat.device)
        mask = steps[None, :] < lengths[:, None]  # [B, T]
        starts = torch.as_tensor(rows.row_offsets[:-1], device=flat.device)
        index = torch.where(mask, starts[:, None] + steps[None, :], 0)  # [B, T]
        # index_select, not flat[index]: its backward adds rows (index_add_), where an indexed read's
        # sorts the indices first (accumulating index_put_), most of an FT step's overhead on CUDA
        hidden = flat.index_select(0, index.reshape(-1)).view(*index.shape, *flat.shape[1:])
        hidden = hidden * mask[:, :, None, None]  # [B, T, L, d], zeros at padding
        return hidden, mask

    def row_map(self, tok):
        """Where each subword of ``tok`` goes: the cache's rows, pooled as the cache was."""
        from ..extract.encode import row_map

        return row_map(tok, granularity=self.granularity, pooling=self.pooling)

    def encode_rows(self, tok, rows, lo: int, hi: int, layers: list[int]) -> torch.Tensor:
        """[hi - lo, len(layers), d] float32: rows ``lo:hi`` of ``rows`` (`row_map`), encoded by
        only the windows that hold them."""
        flat = self.encoder.encode_unit(tok, rows, lo, hi, storage=torch.float32, grad=torch.is_grad_enabled(),
                                        ahead=False)  # [hi - lo, L+1, d]
        return _layers_of(flat, list(layers))

    def encode_ids(self, blocks: list[np.ndarray], layers: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden [B, T, len(layers), d] float32, mask [B, T] bool) for blocks of token ids (MLM):
        each fed as [CLS] block [SEP] (the tokenizer's own specials), padded, as extraction feeds a
        block that fits one window, so the rows are the MLM cache's rows."""
        enc = self.encoder
        seqs = [enc.prefix_ids + [int(t) for t in block] + enc.suffix_ids for block in blocks]
        width = enc.padded_width(max(len(s) for s in seqs))
        ids = torch.full((len(seqs), width), enc.pad_id, dtype=torch.long)
        attention = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.as_tensor(s)
            attention[i, : len(s)] = 1
        states = enc.forward(ids.to(self.device), attention.to(self.device),
                             grad=torch.is_grad_enabled())  # L+1 x [B, W, d]
        lengths = torch.as_tensor([len(b) for b in blocks], device=self.device)
        T, start = int(lengths.max()), len(enc.prefix_ids)
        hidden = torch.stack([states[layer][:, start:start + T] for layer in layers], dim=2).float()  # [B, T, L, d]
        mask = torch.arange(T, device=self.device)[None, :] < lengths[:, None]  # [B, T]
        return hidden * mask[:, :, None, None], mask  # zeros at padding (the suffix and pad states)

    def reset(self) -> None:
        """Back to the pretrained weights (the first call keeps them), every parameter trainable: every
        FT run starts from the same backbone, however many runs share it."""
        if self._pretrained is None:
            self._pretrained = {k: v.detach().clone() for k, v in self.state_dict().items()}
        else:
            self.load_state_dict(self._pretrained)
        # The pooler (BERT's [CLS] projection) feeds no token head: left trainable it was counted as
        # FT's trainable parameters while it never had a gradient.
        pooler = getattr(self.model, "pooler", None)
        unused = {id(p) for p in pooler.parameters()} if isinstance(pooler, torch.nn.Module) else set()
        for p in self.parameters():
            p.requires_grad_(id(p) not in unused)

    def for_run(self, frozen: str | int | None) -> LiveBackbone:
        """This backbone `reset` for a new run, then frozen as ``frozen`` asks (`freeze.freeze`)."""
        self.reset()
        freeze(self, frozen)
        return self


def load_live_backbone(meta: dict, *, device, precision: str = DEFAULT_PRECISION, model_path: str | None = None,
                       trust_remote_code: bool = False, model: str | None = None,
                       token_budget: int = ONE_FORWARD) -> LiveBackbone:
    """The backbone a cache entry (or checkpoint) was made with, checked against its revision: the model it
    names, or ``model`` (its folder, moved since), checked all the same; ``model_path``: an FT head's tuned
    backbone, checked by its own hash beforehand. ``token_budget``: padded tokens a forward pass takes."""
    from ..cache.layout import is_remote
    from ..extract.models import load_model, load_tokenizer, model_info, model_source, revision_matches

    if meta.get("special_tokens"):
        raise LayerfuseError("heads over a cache with special-token rows (extract --special-tokens) run on "
                              "cached hidden states only: no live backbone for FT or predict")
    entry = meta.get("path") or ""  # a head's entry: a built-in model is joined into its root's models/
    root = os.path.dirname(entry.rstrip("/")) if entry and not is_remote(entry) else None
    info = model_info(model_path or model_source(meta, model), trust_remote_code=trust_remote_code, cache_dir=root)
    if model_path is None and meta.get("model_revision") and not revision_matches(info, meta["model_revision"]):
        raise LayerfuseError(
            f"model {model or meta['model']} now has revision {info.revision}, but the cache was made with "
            f"{meta['model_revision']}; its hidden states would not match"
        )
    if info.hidden_size != int(meta["hidden_size"]) or info.num_layers != int(meta["num_layers"]):
        raise LayerfuseError(
            f"model {info.name} has {info.num_layers} layers of width {info.hidden_size}, the head expects "
            f"{meta['num_layers']} of width {meta['hidden_size']}"
        )
    tokenizer = load_tokenizer(info, trust_remote_code=trust_remote_code)
    model = load_model(info, device=device, trust_remote_code=trust_remote_code)
    return LiveBackbone(model, tokenizer, granularity=meta.get("granularity", "word"),
                        pooling=meta.get("pooling", "first") if meta.get("pooling") != "none" else "first",
                        max_length=int(meta.get("max_length") or info.max_length), device=device,
                        precision=meta.get("precision", precision), token_budget=token_budget)


def _layers_of(flat: torch.Tensor, layers: list[int]) -> torch.Tensor:
    """``flat[:, layers]``: a slice when the layers are consecutive (its backward a copy into place),
    else `index_select` (an indexed read's backward sorts its indices on CUDA)."""
    if layers and layers == list(range(layers[0], layers[0] + len(layers))):
        return flat[:, layers[0]:layers[0] + len(layers)]
    return flat.index_select(1, torch.as_tensor(layers, device=flat.device))
