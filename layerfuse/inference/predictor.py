"""Tagging new text with a trained head and its backbone: words in, tags and entity spans out."""

from __future__ import annotations

import os

import numpy as np

from ..errors import LayerfuseError
from ..tasks import task_of


def entities(tags: list[str], words: list[tuple[str, int, int]], text: str) -> list[dict]:
    """Entity spans from IOB2 tags (seqeval's chunking), with word and character offsets."""
    from seqeval.metrics.sequence_labeling import get_entities

    out = []
    for etype, start, end in get_entities(tags):  # end inclusive
        lo, hi = words[start][1], words[end][2]
        out.append({"text": text[lo:hi], "type": etype, "words": [start, end + 1], "chars": [lo, hi]})
    return out


class Predictor:
    """A checkpoint plus the backbone it needs (the fine-tuned one for an FT head)."""

    def __init__(self, checkpoint: str, *, device=None, model: str | None = None):
        self.head, self.meta, self.backbone, self.device = load_head(checkpoint, device=device, model=model)
        if not task_of(self.meta).labels_from_data:
            raise LayerfuseError(f"{checkpoint} is an {self.meta['task'].upper()} head, not a tagger; use --fill-mask")
        self.layers = self.meta["layers"]
        self.label_names = self.meta["label_names"]

    def words(self, text: str) -> list[tuple[str, int, int]]:
        """``(word, start, end)`` of each word of a raw text, as `predict --text` and an exported model's
        pipeline find them: `split_words`'s, less those the backbone's tokenizer deletes, each cut to the
        characters its tokens cover (`tokenized_words`)."""
        from .words import split_words, tokenized_words

        return tokenized_words(split_words(text), self.backbone.tokenizer)

    def tag(self, sentences: list[list[str]], *, batch_size: int = 32) -> list[list[str]]:
        """The tag of each word of each sentence (a list of words). Raw text is split into words first:
        ``[w for w, _, _ in predictor.words(text)]``, as `predict --text` does."""
        import torch

        if isinstance(sentences, str):  # a string tagged per character
            raise LayerfuseError("tag() takes sentences as lists of words; split a text first with "
                                 "[w for w, _, _ in predictor.words(text)]")
        # Read once, in order, as lists: a pandas Series indexed otherwise than 0..n-1 (a filtered or sorted
        # column) was read by label below, one sentence's tags given to another; a generator was used up by the
        # check; a numpy array of words failed the emptiness test.
        sentences = [s if isinstance(s, str) else list(s) for s in sentences]
        if any(isinstance(s, str) for s in sentences):
            raise LayerfuseError("tag() takes sentences as lists of words; split a text first with "
                                 "[w for w, _, _ in predictor.words(text)]")
        for i, words in enumerate(sentences):  # (word, start, end) of words(), say: a tokenizer's TypeError
            odd = next((w for w in words if not isinstance(w, str)), None)
            if odd is not None:
                raise LayerfuseError(f"tag(): sentence {i} holds {odd!r}, not a word (a string); words() gives "
                                     "(word, start, end): tag([w for w, _, _ in predictor.words(text)])")
        out: list = [[] for _ in sentences]  # an empty sentence: nothing to encode, no tags
        with torch.inference_mode():
            for batch in _batches([len(s) for s in sentences], batch_size):
                batch = [i for i in batch if sentences[i]]
                if not batch:
                    continue
                for i, labels in zip(batch, self._labels([sentences[i] for i in batch])):
                    out[i] = [self.label_names[t] for t in labels]
        return out

    def _labels(self, sentences: list[list[str]]) -> list:
        """The label index of each word of each sentence (a batch of `_batches`)."""
        from ..extract.tokenize import tokenize_words

        tok = tokenize_words(self.backbone.tokenizer, sentences)
        if len(sentences) == 1 and self.head.fusion.token_wise:  # alone: maybe a book; tagged in slices
            pred = [self._row_labels(tok)]
        else:
            hidden, mask = self.backbone(None, self.layers, tokens=tok)
            pred = self.head(hidden, mask).argmax(-1).cpu().numpy()  # [B, T]
        return [p[rows] for p, rows in zip(pred, self._word_rows(sentences, tok))]

    def _row_labels(self, tok) -> np.ndarray:
        """The label index of each row of the one sentence of ``tok``, ``ROWS_PER_BATCH`` rows at a time:
        a head that tags each token from that token alone needs no more of the sentence at once, and each
        slice is encoded by only the windows holding it (within the backbone's token budget), so a whole
        book's text takes the memory of a slice."""
        import torch

        rows = self.backbone.row_map(tok)
        n_rows = int(rows.row_offsets[-1])
        labels = []
        for lo in range(0, n_rows, ROWS_PER_BATCH):
            hidden = self.backbone.encode_rows(tok, rows, lo, min(lo + ROWS_PER_BATCH, n_rows), self.layers)
            mask = torch.ones(hidden.shape[:1], dtype=torch.bool, device=hidden.device)
            labels.append(self.head(hidden[None], mask[None])[0].argmax(-1).cpu().numpy())
        return np.concatenate(labels)

    def _word_rows(self, sentences: list[list[str]], tok) -> list:
        """The row that tags each word: the word's own, or (a subword cache's head) its first subword's,
        the row training scores it on. ``tok``: the sentences as `tokenize_words` gave them."""
        if self.backbone.granularity != "subword":
            return [np.arange(len(words)) for words in sentences]
        rows = []
        for b in range(len(tok.sub_offsets) - 1):
            word = tok.word_of_sub[tok.sub_offsets[b]:tok.sub_offsets[b + 1]]  # every word has a subword (or UNK)
            rows.append(np.flatnonzero(np.concatenate([[True], word[1:] != word[:-1]])))
        return rows


ROWS_PER_BATCH = 8192  # padded words (rows) a batch of `Predictor.tag` holds: [B, T, L, d] stays bounded by it


def _batches(lengths: list[int], batch_size: int, rows: int = ROWS_PER_BATCH) -> list[list[int]]:
    """The sentences' indices, longest first, in batches of at most ``batch_size`` sentences padded to at
    most ``rows`` words (a longer sentence alone): in file order, one 5,000-word sentence padded the 31
    beside it to its length, 16 GB at roberta-large's shape."""
    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if batches and len(batches[-1]) < batch_size and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= rows:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _check_tuned_backbone(checkpoint: str, meta: dict, folder: str | None) -> None:
    """An FT head tags only with the backbone tuned with it: without it (a head a sweep kept from Python,
    which saves the head alone), or with another folder put in its place, the cache's pretrained backbone
    or another run's tagged in silence. A head of another mode naming a folder (its JSON edited) is refused:
    the folder would load unchecked."""
    from ..training.checkpoint import weights_sha256

    mode = (meta.get("config") or {}).get("mode")
    if mode != "ft":
        if folder:  # only FT saves a backbone beside its head: this one would load unchecked
            raise LayerfuseError(f"{checkpoint} names a tuned backbone ({folder}) but is not an FT head (mode "
                                 f"{mode!r}); restore the file or train the head again")
        return
    if not folder:
        raise LayerfuseError(f"{checkpoint} is an FT head saved without its fine-tuned backbone: train it with "
                             "`train-head --mode ft`, which saves the backbone beside the head")
    if not os.path.isdir(folder):
        raise LayerfuseError(f"{checkpoint}: its fine-tuned backbone {folder} is missing")
    recorded = meta.get("backbone_sha256")
    if recorded is not None and weights_sha256(folder) != recorded:
        raise LayerfuseError(f"{checkpoint}: the backbone in {folder} is not the one tuned with this head (changed "
                             "or replaced since); train the head again")


def load_head(checkpoint: str, *, device=None, model: str | None = None):
    """(head in eval mode, checkpoint metadata, its live backbone in eval mode, device): the backbone
    of the cache it was trained on (``model``: its folder where it has moved since, checked against the
    revision recorded), or the fine-tuned one saved beside an FT head; it encodes within extraction's
    default token budget for ``device``."""
    from ..extract.entry import default_token_budget
    from ..finetune.live import load_live_backbone
    from ..training.checkpoint import checkpoint_paths, load_checkpoint
    from ..training.run_record import as_run_record, resolve_head
    from ..training.runtime import pick_device

    if not isinstance(checkpoint, (str, os.PathLike)):
        raise LayerfuseError(f"a head is a checkpoint's path or its run record's (<run>.json), got {checkpoint!r:.80}")
    checkpoint = as_run_record(str(checkpoint))
    if checkpoint.endswith(".json"):  # the run record train-head prints, as predict and export take it
        checkpoint = resolve_head(checkpoint)[0]
    device = pick_device(device)
    head, meta = load_checkpoint(checkpoint, device=str(device))
    backbone_dir = meta.get("backbone_path")
    if backbone_dir and not os.path.isabs(backbone_dir):  # stored relative to the checkpoint
        backbone_dir = os.path.join(os.path.dirname(checkpoint_paths(checkpoint)[1]), backbone_dir)
    _check_tuned_backbone(checkpoint, meta, backbone_dir)
    if backbone_dir and model:
        raise LayerfuseError(f"{checkpoint} is an FT head: its tuned backbone is the one beside it, not --model's")
    # extraction's budget: a text's windows go through the backbone a few at a time, as a cache's do
    backbone = load_live_backbone(meta["cache"], device=device, model_path=backbone_dir, model=model,
                                  token_budget=default_token_budget(device))
    backbone.eval()
    return head, meta, backbone, device
