"""CoNLL-U (Universal Dependencies) files: sentences of syntactic words with UPOS, XPOS, HEAD, DEPREL.

The format (universaldependencies.org/format.html): UTF-8 text; a word line has 10 tab-separated
fields ``ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC``; a blank line ends a sentence; lines
starting with ``#`` are comments. Fields are split on tabs only, since UD allows spaces inside FORM
and LEMMA.

Which lines are words:

- Integer ids (``1``, ``2``, ...) are the syntactic words; they are what this reader returns.
- Multiword-token ranges (``1-2  vámonos  _ ...``) are surface tokens, not words: they are dropped
  and their syntactic words (``1 vamos``, ``2 nos``) kept, so a backbone later sees ``vamos nos``
  where the text had ``vámonos``. Every UPOS, XPOS, HEAD and DEPREL belongs to a syntactic word (a
  range line has ``_`` in all of them), so keeping the surface token would leave no label for it
  and no word for the labels of its parts.
- Empty nodes (``8.1``) are skipped: they carry no surface word and exist only for the enhanced
  dependencies (DEPS), which this reader does not read.

Checks, each a one-line :class:`LayerfuseError` naming the file, the line number and the value:
10 fields per line; an id that is an integer, a range ``N-M`` or an empty node ``N.K``; integer ids
in sequence from 1 within a sentence (a range must start at the next word and end past it; an
empty node must follow word ``N``, or come first with ``N = 0``); HEAD an integer. HEAD is not
checked against the sentence length. ``_`` (no XPOS, say) is kept as the string ``_``. The
``# sent_id = `` and ``# text = `` comments of a sentence are kept; other comments are skipped.

A treebank directory holds ``*-ud-train.conllu``, ``*-ud-dev.conllu``, ``*-ud-test.conllu`` (the
UD naming convention) or ``train.conllu``, ``dev.conllu`` (``valid``/``validation`` too),
``test.conllu``; :func:`treebank_files` finds them, :func:`read_treebank` reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from layerfuse.errors import LayerfuseError, not_utf8
from layerfuse.extract.tagged import open_text

LABEL_COLUMNS = ("upos", "xpos", "deprel")  # the label columns a UD sentence offers
N_FIELDS = 10

# ASCII digits only: str.isdigit() and \d also take superscripts and other scripts' digits, which
# int() then rejects (a traceback) or reads as another number.
_INTEGER = re.compile(r"[0-9]+")
_RANGE = re.compile(r"([0-9]+)-([0-9]+)")
_EMPTY_NODE = re.compile(r"([0-9]+)\.([0-9]+)")
_SPLIT_STEMS = {"train": ("train",), "dev": ("dev", "valid", "validation"), "test": ("test",)}


@dataclass
class UdSentence:
    """One sentence: per syntactic word its form, UPOS, XPOS, HEAD (0 = root) and DEPREL."""

    words: list[str] = field(default_factory=list)
    upos: list[str] = field(default_factory=list)
    xpos: list[str] = field(default_factory=list)
    head: list[int] = field(default_factory=list)
    deprel: list[str] = field(default_factory=list)
    sent_id: str | None = None
    text: str | None = None

    def labels(self, column: str) -> list[str]:
        """The labels of ``column`` (one of :data:`LABEL_COLUMNS`), one per word."""
        if column not in LABEL_COLUMNS:
            raise LayerfuseError(f"no CoNLL-U label column {column!r}; choose from {', '.join(LABEL_COLUMNS)}")
        return getattr(self, column)


def _error(path: Path, lineno: int, what: str, value: str) -> LayerfuseError:
    shown = value if len(value) <= 60 else value[:57] + "..."
    return LayerfuseError(f"{path}:{lineno}: {what}: {shown!r}")


class _SentenceBuilder:
    """Collects the word lines of one sentence and checks their ids are in sequence."""

    def __init__(self, path: Path):
        self.path = path
        self.sentence = UdSentence()
        self.covered = 0  # the last word id a multiword-token range announced
        self.range_line = (0, "")  # where that range was: (line number, its id)
        self.empty_nodes = 0  # empty nodes seen after the current word

    def add(self, lineno: int, line: str) -> None:
        fields = line.split("\t")
        if len(fields) != N_FIELDS:
            raise _error(self.path, lineno, f"{len(fields)} tab-separated fields where CoNLL-U has {N_FIELDS}", line)
        word_id, last = fields[0], len(self.sentence.words)
        if _INTEGER.fullmatch(word_id):
            if int(word_id) != last + 1:
                raise _error(self.path, lineno, f"word id out of sequence (expected {last + 1})", word_id)
            self._add_word(lineno, fields)
        elif match := _RANGE.fullmatch(word_id):
            start, end = int(match[1]), int(match[2])
            if start != last + 1 or end <= start or start <= self.covered:
                raise _error(self.path, lineno, f"multiword-token range out of sequence (next word is {last + 1})",
                             word_id)
            self.covered, self.range_line = end, (lineno, word_id)
        elif match := _EMPTY_NODE.fullmatch(word_id):
            if int(match[1]) != last or int(match[2]) != self.empty_nodes + 1:
                raise _error(self.path, lineno, f"empty node out of sequence (expected {last}.{self.empty_nodes + 1})",
                             word_id)
            self.empty_nodes += 1
        else:
            raise _error(self.path, lineno, "id is neither an integer, a range N-M nor an empty node N.K", word_id)

    def check_complete(self) -> None:
        """At the sentence's end: every word its last multiword-token range announced has come."""
        if self.covered > len(self.sentence.words):
            lineno, word_id = self.range_line
            raise _error(self.path, lineno, f"multiword-token range announces words up to {self.covered}, but the "
                         f"sentence ends at word {len(self.sentence.words)}", word_id)

    def _add_word(self, lineno: int, fields: list[str]) -> None:
        if not _INTEGER.fullmatch(fields[6]):
            raise _error(self.path, lineno, "HEAD is not an integer", fields[6])
        s = self.sentence
        s.words.append(fields[1])
        s.upos.append(fields[3])
        s.xpos.append(fields[4])
        s.head.append(int(fields[6]))
        s.deprel.append(fields[7])
        self.empty_nodes = 0


def read_conllu(path: str | Path) -> list[UdSentence]:
    """Every sentence of a CoNLL-U file (see the module docstring for what counts as a word)."""
    path = Path(path)
    sentences: list[UdSentence] = []
    builder = _SentenceBuilder(path)
    lineno = 0

    def finish() -> None:
        nonlocal builder
        builder.check_complete()
        if builder.sentence.words:
            sentences.append(builder.sentence)
        builder = _SentenceBuilder(path)

    try:
        with open_text(path) as handle:
            for lineno, raw in enumerate(handle, 1):
                line = raw.rstrip("\r\n").removeprefix("\ufeff")  # a byte-order mark inside: files joined with `cat`
                if not line.strip():
                    finish()
                elif line.startswith("#"):
                    _keep_comment(builder.sentence, line)
                else:
                    builder.add(lineno, line)
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except OSError as err:
        raise LayerfuseError(f"{path}: cannot read: {err.strerror or err}") from None
    finish()  # the last sentence of a file that does not end with a blank line
    if not sentences:
        raise LayerfuseError(f"{path}: no sentences (no word lines with integer ids)")
    return sentences


def _keep_comment(sentence: UdSentence, line: str) -> None:
    """Keep ``# sent_id = X`` and ``# text = X``; any other comment is skipped."""
    key, sep, value = line[1:].partition("=")
    if sep and key.strip() in ("sent_id", "text"):
        setattr(sentence, key.strip(), value.strip())


def treebank_files(directory: str | Path) -> dict[str, Path]:
    """The ``.conllu`` file of each split present in ``directory`` (UD names or plain split names).

    Two files for one split are an error; a directory without any gives ``{}``.
    """
    directory = Path(directory)
    files: dict[str, Path] = {}
    for split, stems in _SPLIT_STEMS.items():
        found = sorted(directory.glob(f"*-ud-{split}.conllu")) + [
            directory / f"{stem}.conllu" for stem in stems if (directory / f"{stem}.conllu").is_file()
        ]
        if len(found) > 1:
            listed = ", ".join(p.name for p in found)
            raise LayerfuseError(f"{directory}: more than one CoNLL-U file for split {split!r}: {listed}")
        if found:
            files[split] = found[0]
    return files


def read_treebank(directory: str | Path) -> dict[str, list[UdSentence]]:
    """The sentences of each split of a treebank directory; it must have a train file."""
    files = treebank_files(directory)
    if "train" not in files:
        raise LayerfuseError(f"{directory}: no CoNLL-U train file (*-ud-train.conllu or train.conllu)")
    return {split: read_conllu(path) for split, path in files.items()}
