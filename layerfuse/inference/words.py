"""How raw text is split into words: one `tokenizers` pre-tokenizer that `predict` splits with and that an
exported model's tokenizer runs first, so both tag the same words.

A word is a run of letters, digits and marks; every punctuation mark or symbol (emoji included) and
every Chinese character is a word of its own; whitespace and invisible format characters between words
are dropped. So ``Jean-Claude`` is three words (``Jean``, ``-``, ``Claude``), as are ``3-1`` and
``O'Neil``; URLs and e-mail addresses split at each ``:``, ``/``, ``.`` and ``@``. The tags decide
whether they join into one entity (``B-PER I-PER I-PER`` is the one span ``Jean-Claude``).

Why so fine: an exported model sees token ids only, and finds where words begin from the vocabulary
(WordPiece's missing ``##``, BPE's ``Ġ``). A WordPiece tokenizer splits every punctuation mark off, so
a word that kept one inside (``Jean-Claude``) could not be found again from the ids; splitting the same
way everywhere keeps `predict`, ``predict --conll`` (whose words come from the file, each tagged whole)
and the exported model's pipeline on the same words.
"""

from __future__ import annotations

import json
import unicodedata
from functools import lru_cache

# Kept runs (the rest is dropped): a run of word characters, allowed to start with invisible format
# or control characters (zero-width joiners a BERT normalizer deletes, joining what they split) but not
# whitespace ones (a tab or newline before a word is no part of it), or one mark, symbol or Chinese character.
PATTERN = (r"[\p{Cc}\p{Cf}&&[^\s]]*[^\s\p{P}\p{S}\p{Cc}\p{Cf}\p{Han}][^\s\p{P}\p{S}\p{Han}]*"
           r"|[\p{P}\p{S}\p{Han}]")


@lru_cache(maxsize=1)
def pre_tokenizer():
    """The word splitter, as a `tokenizers` pre-tokenizer (the same object on both paths)."""
    from tokenizers import Regex
    from tokenizers.pre_tokenizers import Split

    return Split(Regex(PATTERN), behavior="removed", invert=True)


def split_words(text: str) -> list[tuple[str, int, int]]:
    """``(word, start, end)`` of each word of ``text``, character offsets."""
    return [(word, start, end) for word, (start, end) in pre_tokenizer().pre_tokenize_str(text)]


def tokenized_words(words: list[tuple[str, int, int]], tokenizer) -> list[tuple[str, int, int]]:
    """``words`` (`split_words`'s) as the backbone's ``tokenizer`` reads them, so that `predict` on raw text
    and an exported model's pipeline tag the same words and report the same spans: a word it turns into no
    token at all (a lone accent under an accent-stripping normalizer, U+FFFD, a private-use character) is
    left out, as the pipeline never sees it; a word is cut to the characters its tokens cover (`_covered`):
    a zero-width joiner, soft hyphen, NUL or byte-order mark a normalizer deletes before or after it is no
    part of the word, its entity or its span. (Words given as words, a CoNLL file's, keep every one: a
    word without tokens is read as the unknown token.)"""
    if not words:
        return words
    from ..extract.tokenize import AS_TEXT

    enc = tokenizer([w for w, _, _ in words], is_split_into_words=True, return_offsets_mapping=True, **AS_TEXT)
    covered: dict[int, list[int]] = {}  # word -> [first, last] character its tokens cover, within the word
    for i, (lo, hi) in zip(enc.word_ids(), enc["offset_mapping"]):
        if i is not None:
            span = covered.setdefault(i, [lo, hi])
            if hi > lo:  # a token of no characters (a SentencePiece mark alone) covers none
                span[:] = [min(span[0], lo), max(span[1], hi)] if span[1] > span[0] else [lo, hi]
    return [_covered(words[i], *covered[i]) for i in range(len(words)) if i in covered]


def _covered(word: tuple[str, int, int], lo: int, hi: int) -> tuple[str, int, int]:
    """``word`` cut to its characters ``lo:hi`` (its tokens' offsets within it). The characters after ``hi``
    that are combining marks stay: an accent the tokenizer strips is part of the letter before it (the
    pipeline's span ends before it, as the export guide says); one at the start has no letter in the word."""
    text, start, _ = word
    if hi <= lo:  # offsets of no characters: nothing to cut by
        return word
    while hi < len(text) and unicodedata.category(text[hi]).startswith("M"):
        hi += 1
    return (text[lo:hi], start + lo, start + hi) if (lo, hi) != (0, len(text)) else word


def split_words_first(backend) -> None:
    """Make the `tokenizers.Tokenizer` ``backend`` split raw text into `split_words`'s words before its
    own pre-tokenizer runs, each word's first token marked as a word start: byte-level BPE adds its
    ``Ġ``, SentencePiece its ``▁``, to every word, as they do to words given one by one. Those marks
    are added, not read off a space, so offsets are not trimmed of them (which would cut a character)."""
    from tokenizers import Tokenizer

    state = json.loads(backend.to_str())
    own = state.get("pre_tokenizer")
    steps = [json.loads(pre_tokenizer().__getstate__())] + ([_mark_starts(own)] if own else [])
    state["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": steps}
    if state.get("post_processor"):
        state["post_processor"] = _untrimmed(state["post_processor"])
    if _cleans_text(state.get("normalizer")):
        state["normalizer"] = {"type": "Sequence", "normalizers": [SEPARATORS_KEPT, state["normalizer"]]}
    words = Tokenizer.from_str(json.dumps(state))
    backend.normalizer, backend.pre_tokenizer, backend.post_processor = (words.normalizer, words.pre_tokenizer,
                                                                          words.post_processor)


# A BERT normalizer (``clean_text``) deletes control characters and U+FFFD before any pre-tokenizer runs,
# joining the words around them ("Paris\fBerlin" became one word), while `split_words` on the raw text
# splits there (the vertical tab, form feed and NEL are whitespace, U+FFFD a symbol): they become spaces
# first, one character for one, so offsets stay the text's. (A control character that is no separator,
# such as NUL or \x1c, is deleted and joins on both paths.)
SEPARATORS_KEPT = {"type": "Replace", "pattern": {"Regex": "[\u000b\u000c\u0085\ufffd]"},
                   "content": " "}


def _cleans_text(normalizer) -> bool:
    if not isinstance(normalizer, dict):
        return False
    if normalizer.get("type") == "Sequence":
        return any(_cleans_text(n) for n in normalizer.get("normalizers") or [])
    return normalizer.get("type") == "BertNormalizer" and bool(normalizer.get("clean_text"))


def _mark_starts(step: dict) -> dict:
    step = dict(step)
    if step.get("type") == "ByteLevel":
        step["add_prefix_space"] = True
    elif step.get("type") == "Metaspace":
        step["prepend_scheme"] = "always"
    elif step.get("type") == "Sequence":
        step["pretokenizers"] = [_mark_starts(s) for s in step["pretokenizers"]]
    return step


def _untrimmed(step: dict) -> dict:
    step = {k: (False if k == "trim_offsets" else v) for k, v in step.items()}
    if step.get("type") == "Sequence":
        step["processors"] = [_untrimmed(s) for s in step["processors"]]
    return step
