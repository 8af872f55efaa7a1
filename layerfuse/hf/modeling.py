"""A trained head as a transformers token-classification model: the backbone (every layer, as
``output_hidden_states`` gives them) feeding the fusion head and its classifier, in one
`PreTrainedModel` that `AutoModelForTokenClassification` and ``pipeline("token-classification")``
load (see `layerfuse.hf.register`).

The head was trained on rows of the cache: one per word (its first, last or mean subword, the
cache's pooling) or one per subword. The model rebuilds those rows from the token sequence the
tokenizer gives, runs the head on them, and gives every token the logits of its word:

- a word's first token carries the word's logits, exactly the head's (what `predict` tags);
- its other tokens carry the same scores with each ``B-X`` moved to ``I-X`` (the larger of the two,
  ``B-X`` set below it), so a pipeline's ``aggregation_strategy="simple"`` joins them into the
  word's entity instead of starting a new one, and "first" reads the word's tag off its first token;
- special and padding tokens carry zeros (pipelines skip them).

Where words start comes from ``word_ids`` when the caller passes them (``tokenizer(...).word_ids()``,
-1 for special tokens), else from the vocabulary: the buffer ``word_start`` says, per token id,
whether that token begins a word (WordPiece: no ``##``; byte-level BPE and SentencePiece: a leading
``Ġ`` or ``▁``), read off the tokenizer at export time. The first token after a special token
always begins a word.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification, PreTrainedConfig, PreTrainedModel
from transformers import __version__ as transformers_version
from transformers.modeling_outputs import TokenClassifierOutput
from transformers.utils import can_return_tuple

from ..fusions.tagger import TokenTagger
from .support import supported

MODEL_TYPE = "layerfuse-tagger"


class LayerfuseTaggerConfig(PreTrainedConfig):
    """``backbone``: the encoder's own config as a dict (its ``model_type`` included); ``tagger``: the
    `TokenTagger` keywords of the head checkpoint; ``layers``: the hidden-state indices it fuses (0 =
    embeddings); ``granularity``/``pooling``: how the cache made its rows; ``special_ids``: token ids
    that are never words; ``max_length``: the longest window the backbone takes (longer inputs are
    encoded in overlapping windows, as `extract` encodes them); ``layerfuse``: where the head came
    from (run record, cache key)."""

    model_type = MODEL_TYPE
    backbone: dict | None = None
    tagger: dict | None = None
    layers: list[int] | None = None
    granularity: str = "word"
    pooling: str = "first"
    special_ids: list[int] | None = None
    max_length: int | None = None  # the backbone's positions, special tokens included; longer inputs are windowed
    layerfuse: dict | None = None

    def backbone_config(self):
        backbone = dict(self.backbone or {})
        return AutoConfig.for_model(backbone.pop("model_type"), **backbone)


class LayerfuseForTokenClassification(PreTrainedModel):
    config_class = LayerfuseTaggerConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"

    def __init__(self, config: LayerfuseTaggerConfig):
        super().__init__(config)
        self.backbone = AutoModel.from_config(config.backbone_config())
        self.tagger = TokenTagger(**config.tagger)
        vocab = int(self.backbone.config.vocab_size)
        self.register_buffer("word_start", torch.ones(vocab, dtype=torch.bool))  # filled by export
        # Not a buffer: from_pretrained would leave a non-persistent buffer uninitialised.
        self.b_to_i = _b_to_i(config.id2label)
        self.post_init()

    def _init_weights(self, module):
        """Nothing: every weight comes from the exported checkpoint (the backbone's and the head's)."""

    @can_return_tuple  # return_dict=False: a tuple, as every transformers model gives
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, word_ids=None, labels=None,
                **kwargs) -> TokenClassifierOutput:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        content, start = self._words(input_ids, attention_mask, word_ids)  # [B, S] bool each
        hidden = self._hidden(input_ids, attention_mask, token_type_ids, content)  # [B, S, L, d]
        word = torch.cumsum(start.long(), dim=1) - 1  # [B, S] word index of each token (content only)
        word = torch.where(content, word, -1)
        if self.config.granularity == "subword":
            row_logits, row_of = self._head(hidden, content, torch.cumsum(content.long(), dim=1) - 1)
            # a word is tagged on its first subword's row, as training scores it and predict tags it
            word_logits = _rows_to_words(row_logits, row_of, start, word)
        else:
            word_logits, _ = self._head(hidden, content, word, pooling=self.config.pooling)
        pairs = torch.tensor(self.b_to_i, dtype=torch.long).reshape(-1, 2)  # (B-X, I-X) label ids
        logits = _words_to_tokens(word_logits, word, start, pairs)  # [B, S, C]
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return TokenClassifierOutput(loss=loss, logits=logits)

    def _layers(self, input_ids, attention_mask, token_type_ids=None):
        """[B, S, L, d]: the fused layers' hidden states of one backbone forward, in the head's dtype
        (float32 as exported; a model loaded or cast to bfloat16 or float16 runs its head in that dtype)."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:  # not every backbone takes them (DistilBERT)
            inputs["token_type_ids"] = token_type_ids
        states = self.backbone(**inputs, output_hidden_states=True).hidden_states  # L+1 x [B, S, d]
        head_dtype = next(self.tagger.parameters()).dtype
        return torch.stack([states[i] for i in self.config.layers], dim=2).to(head_dtype)

    def _hidden(self, input_ids, attention_mask, token_type_ids, content):
        """[B, S, L, d]; a sequence longer than the backbone's positions is encoded as `extract` and `predict`
        encode it: overlapping windows over its content tokens, each between the sequence's own leading
        and trailing special tokens, every token taken from the window where it sits furthest from an edge."""
        longest = self.config.max_length
        if not longest or input_ids.shape[1] <= longest:
            return self._layers(input_ids, attention_mask, token_type_ids)
        from ..extract.tokenize import windows

        out = None
        for b in range(input_ids.shape[0]):
            real = attention_mask[b].bool()
            inner = torch.nonzero(content[b]).flatten()  # content token positions
            if len(inner) == 0:
                continue
            everything = torch.nonzero(real).flatten()
            prefix = everything[everything < inner[0]]
            suffix = everything[everything > inner[-1]]
            width = longest - len(prefix) - len(suffix)
            for lo_w, hi_w, keep_lo, keep_hi in windows(len(inner), width):
                ids = torch.cat([input_ids[b, prefix], input_ids[b, inner[lo_w:hi_w]], input_ids[b, suffix]])
                h = self._layers(ids[None], torch.ones_like(ids)[None])[0]  # [W, L, d]
                if out is None:
                    out = h.new_zeros(*input_ids.shape, *h.shape[1:])
                at = len(prefix) + keep_lo - lo_w
                out[b, inner[keep_lo:keep_hi]] = h[at:at + keep_hi - keep_lo]
        if out is None:  # no content anywhere: nothing to tag
            return self._layers(input_ids[:, :longest], attention_mask[:, :longest]).new_zeros(
                *input_ids.shape, len(self.config.layers), self.backbone.config.hidden_size)
        return out

    def _words(self, input_ids, attention_mask, word_ids):
        """(content [B, S]: real, non-special tokens; start [B, S]: tokens that begin a word)."""
        if word_ids is not None:
            content = (word_ids >= 0) & attention_mask.bool()
            before = torch.nn.functional.pad(word_ids[:, :-1], (1, 0), value=-1)
            return content, content & (word_ids != before)
        special = torch.zeros_like(input_ids, dtype=torch.bool)
        for i in self.config.special_ids or []:
            special |= input_ids == i
        content = attention_mask.bool() & ~special
        previous = torch.nn.functional.pad(content[:, :-1], (1, 0), value=False)
        return content, content & (self.word_start[input_ids] | ~previous)

    def _head(self, hidden, content, row, *, pooling: str = "first"):
        """The head's logits [B, R, C] over rows gathered from the tokens: token t of sequence b goes to
        row ``row[b, t]`` (content tokens only), pooled as the cache pooled them; also each token's row."""
        B, S, L, d = hidden.shape
        R = int(row.max()) + 1 if content.any() else 0
        flat = torch.where(content, torch.arange(B, device=row.device)[:, None] * max(R, 1) + row, B * max(R, 1))
        rows = hidden.new_zeros(B * max(R, 1) + 1, L, d)  # one spare row takes every non-content token
        if pooling == "mean":
            count = hidden.new_zeros(B * max(R, 1) + 1).index_add_(0, flat.flatten(), hidden.new_ones(B * S))
            rows.index_add_(0, flat.flatten(), hidden.flatten(0, 1))
            rows = rows / count.clamp(min=1)[:, None, None]
        else:  # first or last: the one token of each row that pooling takes (every token, for subword rows)
            pick = content & (row != _shift(row, 1 if pooling == "first" else -1))
            rows[flat[pick]] = hidden[pick]
        rows = rows[:-1].view(B, max(R, 1), L, d)[:, :R]
        lengths = torch.zeros(B, dtype=torch.long, device=row.device)
        lengths = torch.where(content, row + 1, 0).amax(dim=1) if S else lengths
        mask = torch.arange(R, device=row.device)[None, :] < lengths[:, None]  # [B, R]
        rows = rows * mask[:, :, None, None]  # zeros at padding, as the cache's batches have them
        return self.tagger(rows, mask), row


def _shift(x, by: int):
    """``x`` moved ``by`` places along dim 1 (right if positive), -1 filling the gap."""
    pad = (by, 0) if by > 0 else (0, -by)
    return torch.nn.functional.pad(x, pad, value=-1)[:, :x.shape[1]] if by > 0 else \
        torch.nn.functional.pad(x, pad, value=-1)[:, -by:]


def _rows_to_words(row_logits, row_of, start, word):
    """[B, W, C] logits of each word's first row (a subword head's rows are the content tokens)."""
    B, _, C = row_logits.shape
    W = int(word.max()) + 1 if (word >= 0).any() else 0
    out = row_logits.new_zeros(B, W, C)
    b, t = torch.nonzero(start, as_tuple=True)
    out[b, word[b, t]] = row_logits[b, row_of[b, t]]
    return out


def _words_to_tokens(word_logits, word, start, b_to_i):
    """[B, S, C]: each content token gets its word's logits (B-X moved to I-X after the first token)."""
    B, S = word.shape
    out = word_logits.new_zeros(B, S, word_logits.shape[-1])
    b, t = torch.nonzero(word >= 0, as_tuple=True)
    out[b, t] = word_logits[b, word[b, t]]
    rest = (word >= 0) & ~start
    if b_to_i.numel() and rest.any():
        z = out[rest]  # [n, C]
        b_idx, i_idx = b_to_i[:, 0], b_to_i[:, 1]
        high = torch.maximum(z[:, b_idx], z[:, i_idx])
        low = torch.minimum(z[:, b_idx], z[:, i_idx]) - 1.0  # strictly below: argmax never picks B-X
        z[:, i_idx], z[:, b_idx] = high, low
        out[rest] = z
    return out


def _b_to_i(id2label) -> list[tuple[int, int]]:
    """(id of B-X, id of I-X) for every type X that has both; none for label sets without them."""
    ids = {str(name): int(i) for i, name in (id2label or {}).items()}
    pairs = [(i, ids["I-" + name[2:]]) for name, i in ids.items() if name.startswith("B-") and "I-" + name[2:] in ids]
    return pairs


def register_auto_classes() -> None:
    """Add ``layerfuse-tagger`` to `AutoConfig` and `AutoModelForTokenClassification` (idempotent)."""
    AutoConfig.register(MODEL_TYPE, LayerfuseTaggerConfig, exist_ok=True)
    AutoModelForTokenClassification.register(LayerfuseTaggerConfig, LayerfuseForTokenClassification,
                                             exist_ok=True)


if supported(transformers_version):
    register_auto_classes()  # whoever imports this module first gets the auto classes that load it
