"""CoNLL-style text files: a folder of split files (CoNLL-2003's ``eng.train``/``eng.testa``/``eng.testb``,
or ``train``/``dev``/``test`` with extension ``.txt``, ``.conll``, ``.iob``, ``.tsv`` or none;
``valid``/``validation``/``devel`` also name dev), or one file (train only; no dev split is made up).
Other files of the folder (a README, ``train2.txt``) are not read, and the extraction log names them.

The word is the first whitespace-separated column (ASCII whitespace only, so odd Unicode spaces stay
inside words), the tag the last, unless ``Reading.columns`` names them (``"word=0,ner=3"``: 0-based
columns, ``ner`` the tag; other names are more label sets, ``chunk`` a span set and any other a token
set; without ``ner``, the first set named is the primary one and unnamed columns are not read); every
token line of a file has the column count of its first token line; ``-DOCSTART-`` lines are skipped and
end a sentence; blank lines separate sentences; a byte-order mark opening any line (files joined with
``cat``) is dropped. CoNLL-2003 layout files (four columns: word, POS, chunk, NER) also give the ``pos``
(token) and ``chunk`` (span, IOB2) label sets.

WikiAnn files of Rahimi et al. 2019 (lines ``lang:word TAG``) are CoNLL-style files recognised because
every word carries a ``xx:`` / ``xxx:`` language prefix, which is stripped.
"""

from __future__ import annotations

import re
from pathlib import Path

from layerfuse.cache.label_sets import SPAN, TOKEN
from layerfuse.cache.layout import SPLIT_ORDER
from layerfuse.errors import LayerfuseError, not_utf8
from layerfuse.extract.iob import split_tag
from layerfuse.extract.reading import primary_of
from layerfuse.extract.tagged import Extras, Sentence, TaggedDataset, open_text

from .registry import DatasetFormat, Request

_CONLL2003_FILES = {"train": "eng.train", "dev": "eng.testa", "test": "eng.testb"}
# devel: the biomedical NER sets (BC5CDR, NCBI-disease and the others of Crichton et al. 2017) name dev so
_SPLIT_STEMS = {"train": ("train",), "dev": ("dev", "valid", "validation", "devel"), "test": ("test",)}
_EXTENSIONS = ("", ".txt", ".conll", ".iob", ".tsv")
_LANG_PREFIX = re.compile(r"([a-z]{2,3}):(?=.)")
_ODD_SPACE = re.compile(r"[^\S \t\r\n\f\v]")  # Unicode whitespace that is not ASCII whitespace
_ASCII_SPACE = re.compile(r"[ \t\r\n\f\v]+")
_SEPARATORS = re.compile("[\x1c-\x1f]")  # ASCII, yet whitespace to str.split

# Named label columns of a CoNLL-2003 layout file (word POS chunk NER): the columns between the word and the tag.
CONLL2003_COLUMNS = {4: (("pos", TOKEN), ("chunk", SPAN))}
SPAN_COLUMNS = ("ner", "chunk")  # named columns read as IOB spans; any other name is a token set


def _shorten(text: str, width: int = 60) -> str:
    """A line as it goes into an error message: stripped, cut, repr'd (so it stays one line)."""
    text = text.strip(" \t\r\n\f\v")  # ASCII only: a line of NBSP shows as '\xa0', not ''
    return repr(text if len(text) <= width else text[: width - 3] + "...")


def _columns(line: str) -> list[str]:
    """Split on ASCII whitespace only; ``str.split`` would also split on NBSP and friends, and on the
    ASCII separators 0x1c-0x1f (a word of its own in some data)."""
    if _ODD_SPACE.search(line) is None:
        return line.split()
    stripped = line.strip(" \t\r\n\f\v")
    return _ASCII_SPACE.split(stripped) if stripped else []


def read_conll(path: Path) -> list[Sentence]:
    """Stream one CoNLL file into (words, raw tags) sentences, checking shape and tags."""
    return read_conll_columns(path)[0]


def read_conll_columns(path: Path, columns: dict[str, int] | None = None,
                        ) -> tuple[list[Sentence], list[list[tuple[str, ...]]], int]:
    """(sentences, the label columns beside the tag of each token per sentence, columns per line): with
    ``columns`` (see `parse_columns`) the word, the primary set's tag (`primary_of`) and the other named
    columns in their order, else the first column, the last and those between. Columns no name reads are
    never checked; the primary tags are checked as IOB where the primary set is a span set."""
    primary = primary_of(columns) if columns else "ner"
    word_at, tag_at = (columns["word"], columns[primary]) if columns else (0, -1)
    others = [c for name, c in columns.items() if name not in ("word", primary)] if columns else None
    need = max(columns.values()) + 1 if columns else 2
    sentences: list[Sentence] = []
    middles: list[list[tuple[str, ...]]] = []
    words: list[str] = []
    tags: list[str] = []
    middle: list[tuple[str, ...]] = []
    width = first_line = 0
    tag_first_line: dict[str, int] = {}
    lineno = 0
    try:
        with open_text(path) as handle:
            for lineno, line in enumerate(handle, 1):
                if line.startswith("\ufeff"):  # a byte-order mark inside the file: files joined with `cat`
                    line = line[1:]
                # inlined fast path of _columns: this loop runs once per token
                cols = line.split() if line.isascii() and not _SEPARATORS.search(line) else _columns(line)
                if not cols or cols[0] == "-DOCSTART-":
                    if words:
                        sentences.append((words, tags))
                        middles.append(middle)
                        words, tags, middle = [], [], []
                    continue
                if len(cols) < need:
                    if columns:
                        name, at = max(columns.items(), key=lambda item: item[1])
                        raise LayerfuseError(f"{path}:{lineno}: --columns {name}={at}, but the line has "
                                              f"{len(cols)} column{'s' * (len(cols) != 1)} (0 to {len(cols) - 1}): "
                                              f"{_shorten(line)}")
                    raise LayerfuseError(f"{path}:{lineno}: a token line without a tag: {_shorten(line)}")
                if width == 0:
                    width, first_line = len(cols), lineno
                elif len(cols) != width:
                    raise LayerfuseError(
                        f"{path}:{lineno}: {len(cols)} columns where line {first_line} has {width}: "
                        f"{_shorten(line)}"
                    )
                tag = cols[tag_at]
                words.append(cols[word_at])
                tags.append(tag)
                middle.append(tuple(cols[1:-1]) if others is None else tuple(cols[c] for c in others))
                if tag not in tag_first_line:
                    tag_first_line[tag] = lineno
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except OSError as err:
        raise LayerfuseError(f"{path}: cannot read: {err.strerror or err}") from None
    if words:
        sentences.append((words, tags))
        middles.append(middle)
    if not sentences:
        raise LayerfuseError(f"{path}: no sentences (the file is empty or holds only -DOCSTART- lines)")
    if primary in SPAN_COLUMNS:
        _check_primary_tags(path, tag_first_line, primary=primary, at=tag_at if columns else None)
    return sentences, middles, width


def _check_primary_tags(path: Path, first_lines: dict[str, int], *, primary: str, at: int | None) -> None:
    """Each distinct tag of the primary span column parses as IOB, else an error at its first line; read by
    default (``at`` None), the last column was taken for NER tags, and the error says how to read a file
    that has none."""
    for tag, line_no in first_lines.items():
        try:
            split_tag(tag, where=f"{path}:{line_no}" + (f" (--columns {primary}={at})" if at is not None else ""))
        except LayerfuseError as exc:
            if at is not None:
                raise
            raise LayerfuseError(f"{exc} (the last column, read as NER tags; a file without them: name the "
                                  "columns to read, e.g. --columns word=0,pos=1)") from None


def _strip_wikiann(sentences: list[Sentence]) -> tuple[list[Sentence], set[str]]:
    """If every word has a ``lang:`` prefix (Rahimi et al. WikiAnn files), strip it.

    Returns the sentences and the languages seen (empty when the files are not WikiAnn's).
    """
    if not all(_LANG_PREFIX.match(w) for words, _ in sentences for w in words):
        return sentences, set()
    langs = {_LANG_PREFIX.match(w).group(1) for words, _ in sentences for w in words}
    stripped = [([_LANG_PREFIX.sub("", w, count=1) for w in words], tags) for words, tags in sentences]
    return stripped, langs


def find_split_file(directory: Path, split: str) -> Path | None:
    """The one file in ``directory`` that holds ``split``; two candidates are an error."""
    names = [_CONLL2003_FILES[split]] + [s + e for s in _SPLIT_STEMS[split] for e in _EXTENSIONS]
    found = [directory / n for n in names if (directory / n).is_file()]
    if len(found) > 1:
        listed = ", ".join(p.name for p in found)
        raise LayerfuseError(f"{directory}: more than one file for split {split!r}: {listed}")
    return found[0] if found else None


def _load_directory(request: Request) -> TaggedDataset:
    """CoNLL-2003 / plain / WikiAnn split files."""
    directory, columns = request.path, request.read.column_map()
    files = {split: find_split_file(directory, split) for split in SPLIT_ORDER}
    if files["train"] is None:
        present = ", ".join(sorted(p.name for p in directory.iterdir())[:10]) or "nothing"
        raise LayerfuseError(
            f"{directory}: no train split (looked for eng.train, train, train.txt, train.conll, "
            f"train.iob, train.tsv, or a datasets save_to_disk directory); it holds: {present}"
        )
    found = {split: read_conll_columns(path, columns) for split, path in files.items() if path is not None}
    raw = {split: sentences for split, (sentences, _, _) in found.items()}
    extras = _named_columns({split: middles for split, (_, middles, _) in found.items()},
                            {split: width for split, (_, _, width) in found.items()},
                            {split: path for split, path in files.items() if path is not None}, columns)
    name, source, raw = _wikiann_or_plain(directory, raw)
    dataset = request.tagged(name=name, source=source, raw=raw, extras=extras, **_primary_set(columns))
    read = [path for path in files.values() if path is not None]
    # files only (a subfolder is no split file), not hidden (an editor's, git's); samefile, not names: on a
    # case-insensitive disk `Train.txt` is the train.txt that was read
    dataset.passed_over = sorted(p.name for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")
                                 and not any(p.samefile(r) for r in read))
    return dataset


def _load_file(request: Request) -> TaggedDataset:
    """One CoNLL-style file: a train split alone."""
    path, columns = request.path, request.read.column_map()
    sentences, middles, width = read_conll_columns(path, columns)
    extras = _named_columns({"train": middles}, {"train": width}, {"train": path}, columns)
    return request.tagged(name=path.stem, source=str(path), raw={"train": _strip_wikiann(sentences)[0]}, extras=extras,
                          **_primary_set(columns))


def _primary_set(columns: dict[str, int] | None) -> dict[str, str]:
    """The primary label set's name and kind: ``ner`` spans, unless ``columns`` names no ner (`primary_of`)."""
    primary = primary_of(columns) if columns else "ner"
    return {"primary": primary, "primary_kind": SPAN if primary in SPAN_COLUMNS else TOKEN}


def _named_columns(middles: dict[str, list[list[tuple[str, ...]]]], widths: dict[str, int],
                   paths: dict[str, Path], columns: dict[str, int] | None = None) -> Extras:
    """The label sets of the other columns: those ``columns`` names beside word and ner, else CoNLL-2003's
    POS and chunk when every file has its four columns (word POS chunk NER) and the third holds IOB tags
    (most of its tokens);
    no named columns otherwise (they stay unread: four columns such as word, lemma, POS, NER are no
    CoNLL-2003 layout, and `--columns` names them). A malformed tag of a span column that ``columns``
    names (chunk) is an error naming file and line."""
    if columns is not None:
        others = {name: c for name, c in columns.items() if name not in ("word", primary_of(columns))}
        names = tuple((name, SPAN if name in SPAN_COLUMNS else TOKEN) for name in others)
        at = list(others.values())
    else:
        names = CONLL2003_COLUMNS.get(next(iter(widths.values()))) if len(set(widths.values())) == 1 else None
        at = [1, 2]
        if names and not _mostly_iob([token[1] for sentences in middles.values()
                                      for sentence in sentences for token in sentence]):
            return {}
    if not names:
        return {}
    for i, (name, kind) in enumerate(names):
        if kind == SPAN:
            for split, sentences in middles.items():
                _check_span_column(paths[split], sentences, column=i, at=at[i], name=name)
    return {name: (kind, {split: [[token[i] for token in sentence] for sentence in sentences]
                          for split, sentences in middles.items()})
            for i, (name, kind) in enumerate(names)}


def _mostly_iob(tags: list[str]) -> bool:
    """Whether a column is chunk tags: most of its tokens parse as IOB (CoNLL-2003's chunks do, a slip or
    two aside, which the check then names; a lemma or POS column hardly ever does)."""
    valid = {}
    for tag in set(tags):
        try:
            split_tag(tag)
            valid[tag] = True
        except LayerfuseError:
            valid[tag] = False
    return sum(valid[tag] for tag in tags) * 2 >= len(tags)


def _check_span_column(path: Path, sentences: list[list[tuple[str, ...]]], *, column: int, at: int,
                       name: str) -> None:
    """Each distinct tag of label column ``column`` (field ``at`` of a line) parses as IOB; the first bad
    one in the file is an error at its first line (found by reading the file again: only on this failing
    path). Tags are tried in the order they first appear, so the same file names the same line every time."""
    for tag in dict.fromkeys(token[column] for sentence in sentences for token in sentence):
        try:
            split_tag(tag)
        except LayerfuseError as exc:
            raise LayerfuseError(f"{path}:{_first_line_with(path, at, tag)}: {name} column (--columns "
                                  f"{name}={at}, counting from 0): {exc}") from None


def _first_line_with(path: Path, column: int, value: str) -> int | str:
    """The number of the first token line of ``path`` whose field ``column`` is ``value``."""
    with open_text(path) as handle:
        for lineno, line in enumerate(handle, 1):
            cols = _columns(line)
            if len(cols) > column and cols[column] == value and cols[0] != "-DOCSTART-":
                return lineno
    return "?"


def _wikiann_or_plain(directory: Path, raw: dict[str, list[Sentence]]):
    """Strip WikiAnn language prefixes only when every word of every split has one."""
    words_all = (w for sentences in raw.values() for words, _ in sentences for w in words)
    if not all(_LANG_PREFIX.match(w) for w in words_all):
        return directory.name, str(directory), raw
    langs: set[str] = set()
    for split, sentences in raw.items():
        raw[split], split_langs = _strip_wikiann(sentences)
        langs |= split_langs
    name = f"wikiann-{langs.pop()}" if len(langs) == 1 else directory.name
    return name, str(directory), raw


CONLL_DIRECTORY = DatasetFormat(
    name="conll-directory", help="CoNLL-style directory or WikiAnn directory",
    claims=lambda request: request.path.is_dir(), load=_load_directory,
    what="a folder of CoNLL-style files", takes=frozenset({"columns"}), catch_all=True)
CONLL_FILE = DatasetFormat(
    name="conll-file", help="CoNLL-style file (train only)",
    claims=lambda request: request.path.is_file(), load=_load_file,
    what="a CoNLL-style file", takes=frozenset({"columns"}), catch_all=True)
