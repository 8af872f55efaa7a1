"""Subword tokenization of pre-split words, planned once per split before any forward pass.

Words that the tokenizer turns into nothing (control or zero-width characters) are encoded as the
tokenizer's unknown token instead, so every word still owns at least one subword and one row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# How words are tokenized everywhere (extraction, FT, predict, the exported tokenizer): a word spelled like
# a special token ("[SEP]", "<mask>") is text, not that token (it was encoded as the separator); no
# specials are added here (`special_tokens`); and no warning that a sentence is longer than the model's
# input: such a sentence is windowed later, so "will result in indexing errors" would be false.
AS_TEXT = dict(split_special_tokens=True, add_special_tokens=False, verbose=False)


@dataclass
class Tokenized:
    ids: np.ndarray  # [n_subwords] int64, every sentence's content subwords concatenated
    sub_offsets: np.ndarray  # [S + 1]: sentence i owns ids[sub_offsets[i]:sub_offsets[i+1]]
    word_of_sub: np.ndarray  # [n_subwords] index of the word within its sentence
    word_offsets: np.ndarray  # [S + 1] word counts, cumulated
    n_empty_words: int  # words encoded as the unknown token

    def select(self, positions) -> Tokenized:
        """The sentences at ``positions``, in that order (a batch of a split tokenized once)."""
        positions = np.asarray(positions, dtype=np.int64)

        def part(flat: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            lengths = offsets[positions + 1] - offsets[positions]
            rows = np.repeat(offsets[positions] - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
            return flat[rows], np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

        ids, sub_offsets = part(self.ids, self.sub_offsets)
        word_of_sub, _ = part(self.word_of_sub, self.sub_offsets)
        word_counts = self.word_offsets[positions + 1] - self.word_offsets[positions]
        return Tokenized(ids=ids, sub_offsets=sub_offsets, word_of_sub=word_of_sub,
                         word_offsets=np.concatenate([[0], np.cumsum(word_counts)]).astype(np.int64),
                         n_empty_words=0)

    def global_word_of_sub(self) -> np.ndarray:
        """[n_subwords] index of each subword's word among all words of the split."""
        sent_of_sub = np.repeat(np.arange(len(self.sub_offsets) - 1), np.diff(self.sub_offsets))
        return self.word_offsets[sent_of_sub] + self.word_of_sub


def subword_layout(tok: Tokenized, specials: tuple[int, int] = (0, 0)) -> tuple[np.ndarray, np.ndarray]:
    """(row offsets [S + 1], row of each subword [n_subwords]) of a subword cache. With ``specials``
    = (before, after), each sentence's rows are the special tokens before its content, its
    subwords, then the special tokens after it; (0, 0): a row per subword and nothing else."""
    before, after = specials
    n_sentences = len(tok.sub_offsets) - 1
    row_offsets = tok.sub_offsets + (before + after) * np.arange(n_sentences + 1)
    sentence_of_sub = np.repeat(np.arange(n_sentences), np.diff(tok.sub_offsets))
    return row_offsets, np.arange(len(tok.ids)) + (before + after) * sentence_of_sub + before


def subword_rows(tok: Tokenized, word_labels: np.ndarray, specials: tuple[int, int] = (0, 0),
                 *, ignore: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row offsets, labels, word_index) of a subword cache: each subword row carries its word's label
    and its word's index in the sentence; special-token rows carry ``ignore`` and word index -1."""
    row_offsets, row_of_sub = subword_layout(tok, specials)
    if specials == (0, 0):  # the layout every subword cache had before special rows existed
        return row_offsets, word_labels[tok.global_word_of_sub()], tok.word_of_sub
    labels = np.full(int(row_offsets[-1]), ignore, dtype=word_labels.dtype)
    labels[row_of_sub] = word_labels[tok.global_word_of_sub()]
    word_index = np.full(int(row_offsets[-1]), -1, dtype=np.int64)
    word_index[row_of_sub] = tok.word_of_sub
    return row_offsets, labels, word_index


def tokenize_words(tokenizer, sentences: list[list[str]], *, batch: int = 4096) -> Tokenized:
    ids, word_of, sub_counts = [], [], []
    n_empty = 0
    for start in range(0, len(sentences), batch):
        chunk = [list(s) for s in sentences[start : start + batch]]
        enc = tokenizer(chunk, is_split_into_words=True, **AS_TEXT)
        for i, words in enumerate(chunk):
            sent_ids, wids = enc["input_ids"][i], enc.word_ids(i)
            present = set(w for w in wids if w is not None)
            if len(present) < len(words):  # a word of no tokens gets the unknown token, in its place
                n_empty += len(words) - len(present)
                pieces = [([], j) for j in range(len(words))]
                for token, w in zip(sent_ids, wids):
                    pieces[w][0].append(token)
                pieces = [(tokens or [tokenizer.unk_token_id], j) for tokens, j in pieces]
                sent_ids = [t for tokens, _ in pieces for t in tokens]
                wids = [j for tokens, j in pieces for _ in tokens]
            ids.extend(sent_ids)
            word_of.extend(wids)
            sub_counts.append(len(sent_ids))
    word_counts = [len(s) for s in sentences]
    return Tokenized(
        ids=np.asarray(ids, dtype=np.int64),
        sub_offsets=np.concatenate([[0], np.cumsum(sub_counts)]).astype(np.int64),
        word_of_sub=np.asarray(word_of, dtype=np.int64),
        word_offsets=np.concatenate([[0], np.cumsum(word_counts)]).astype(np.int64),
        n_empty_words=n_empty,
    )


def special_tokens(tokenizer) -> tuple[list[int], list[int]]:
    """(ids before the content, ids after it) that the tokenizer adds around one sequence, read
    off a probe so it works for any fast tokenizer ([CLS] x [SEP], <s> x </s>, none at all)."""
    words = ["a", "b", "c"]
    bare = tokenizer(words, is_split_into_words=True, add_special_tokens=False)["input_ids"]
    full = tokenizer(words, is_split_into_words=True, add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return list(full[:start]), list(full[start + len(bare) :])
    raise ValueError(f"cannot locate the content inside the special tokens of {type(tokenizer).__name__}")


def windows(n_sub: int, width: int) -> list[tuple[int, int, int, int]]:
    """Overlapping windows over a sentence of n_sub subwords, each at most `width` long.

    Returns (start, end, keep_lo, keep_hi): the window covers [start, end) and supplies the vectors
    of subwords [keep_lo, keep_hi), each subword taken from the window where it sits furthest
    from an edge (so it sees the most context). The kept ranges tile [0, n_sub) exactly.
    """
    if n_sub <= width:
        return [(0, n_sub, 0, n_sub)]
    stride = max(1, width // 2)
    starts = list(range(0, n_sub - width, stride)) + [n_sub - width]
    out = []
    for k, s in enumerate(starts):
        lo = 0 if k == 0 else (s + starts[k - 1] + width) // 2  # midpoint of the overlap with the previous
        hi = n_sub if k == len(starts) - 1 else (starts[k + 1] + s + width) // 2
        out.append((s, s + width, lo, hi))
    return out
