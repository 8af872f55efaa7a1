"""Scoring a head on a labelled CoNLL file: read it as the datasets reader does, tag its words, write
``word gold pred`` lines (what conlleval reads) and a per-type precision/recall/F1 report (a head of
a token-level label set, POS say: per-tag accuracy).

The numbers are the project's own metric (:mod:`layerfuse.training.metrics`, conlleval's
chunking as seqeval's default mode has it), so the micro F1 here is the F1 the training evaluation
reports on the same words; seqeval's ``classification_report`` in its default mode gives the same
per-type numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import LayerfuseError, OptionError
from ..extract.datasets import load_dataset
from ..extract.iob import split_tag
from ..extract.reading import Reading
from ..extract.tagged import open_text
from ..training.metrics import Chunker, entity_f1

Sentence = tuple[list[str], list[str]]


def read_labelled(path: str, *, label_set: str | None = None, columns: str | None = None) -> list[Sentence]:
    """(words, gold tags) per sentence of a CoNLL file: word first, gold tag last (or where ``columns``,
    ``extract --columns``'s value, puts them), ``-DOCSTART-`` lines skipped, the tag scheme detected over
    the file and normalised to IOB2 (the datasets reader, reading one file as a train-only dataset).
    ``label_set``: another set than the file's primary one, e.g. ``pos`` or ``chunk`` of a CoNLL-2003
    layout file, or ``xpos`` of a ``.conllu`` file."""
    if not Path(path).is_file():
        raise LayerfuseError(f"{path}: no such file")
    data = load_dataset(str(path), read=Reading(columns=columns))
    if label_set is None or label_set == data.primary:
        return data.splits["train"]
    if label_set not in data.label_set_names:  # --columns that name no column of the head's set
        read = Reading(columns=columns).describe().strip(" ()") if columns else "read word first, tag last"
        raise LayerfuseError(f"{path}: the head tags {label_set}, and the file ({read}) has no {label_set} "
                             f"column: name it, e.g. --columns word=0,{label_set}=1")
    tags = data.column(label_set).tags["train"]
    return [(words, column) for (words, _), column in zip(data.splits["train"], tags)]


def read_for_head(path: str, cache: dict, *, columns: str | None = None) -> list[Sentence]:
    """`read_labelled` for a head whose cache metadata is ``cache``: with ``columns`` (--columns) when
    given; else with the columns of the head's own training data (its word and label-set columns only: a
    pos or ner column the head never reads is not asked of the file), and failing that as the file lays
    itself out."""
    from ..extract.reading import columns_of_source, parse_columns, primary_of

    label_set = cache.get("label_set")
    if columns:  # a head that records no set tags ner (its checkpoint names any other), whatever --columns reads
        return read_labelled(path, label_set=label_set or "ner", columns=columns)
    inferred = columns_of_source(cache.get("dataset_source"))
    if inferred:
        try:
            parsed = parse_columns(inferred)
        except OptionError as exc:  # read from the head's record, not the command line: no usage error
            raise LayerfuseError(f"the head records its training data as {cache.get('dataset_source')!r}, whose "
                                 f"columns do not read ({exc}); name the file's columns with --columns") from None
        needed = {name: at for name, at in parsed.items() if name in ("word", label_set or primary_of(parsed))}
        try:
            return read_labelled(path, label_set=label_set, columns=needed)
        except LayerfuseError as exc:
            try:  # a file of another layout than the training data's: word first, tag last
                return read_labelled(path, label_set=label_set)
            except LayerfuseError:
                shown = ",".join(f"{name}={at}" for name, at in needed.items())
                raise LayerfuseError(f"{exc} (columns {shown}, as the head's training data was read; give "
                                     "--columns for this file)") from None
    return read_labelled(path, label_set=label_set)


def check_known_tokens(path: str, sentences: list[Sentence], label_names: list[str]) -> None:
    """A gold tag the head of a token-level set was not trained on is an error naming file and line."""
    known = set(label_names)
    for s, (_, tags) in enumerate(sentences):
        for w, tag in enumerate(tags):
            if tag not in known:
                raise LayerfuseError(f"{_where(path, s, w)}: tag {tag!r} is not one the head was trained on "
                                      f"({len(label_names)} tags: {', '.join(label_names[:10])}"
                                      f"{', ...' if len(label_names) > 10 else ''})")


def _where(path: str, sentence: int, word: int) -> str:
    """``path:line: 'the line'`` of the ``word``-th word of the ``sentence``-th sentence, counted as the
    reader counts them (blank and -DOCSTART- lines end a sentence): the line itself, not one of another
    column holding the same text, or the first of its type in the last column. A layout that reader
    does not read line by line (.conllu, a Hub dataset) is named by its path and position."""
    from ..extract.formats.conll import _columns, _shorten

    if Path(path).suffix.lower() != ".conllu":
        at, seen = (sentence, word), (0, 0)
        with open_text(path) as handle:
            for lineno, line in enumerate(handle, 1):
                cols = _columns(line.lstrip("\ufeff"))
                if not cols or cols[0] == "-DOCSTART-":
                    seen = (seen[0] + 1, 0) if seen[1] else seen
                    continue
                if seen == at:
                    return f"{path}:{lineno}: {_shorten(line)}"
                seen = (seen[0], seen[1] + 1)
    return f"{path}: sentence {sentence + 1}, word {word + 1}"


def token_report(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """``{"tags": {tag: {accuracy, support}}, "micro": {accuracy, support}}``: per gold tag the share
    of its words tagged right (its recall), and over all words the token accuracy the training
    evaluation reports."""
    g = np.array([t for tags in gold for t in tags], dtype=object)
    p = np.array([t for tags in pred for t in tags], dtype=object)
    right = g == p
    tags = {str(t): {"accuracy": float(right[g == t].mean()), "support": int((g == t).sum())}
            for t in sorted(set(g.tolist()))}
    return {"tags": tags, "micro": {"accuracy": float(right.mean()) if len(g) else 0.0, "support": len(g)}}


def format_token_report(report: dict) -> str:
    rows = [*report["tags"].items(), ("all words", report["micro"])]
    width = max(len(name) for name, _ in rows)
    lines = [f"{'tag':<{width}}  accuracy  support"]
    lines += [f"{name:<{width}}  {100 * s['accuracy']:8.2f}  {s['support']:7d}" for name, s in rows]
    return "\n".join(lines)


def check_known(path: str, sentences: list[Sentence], label_names: list[str]) -> None:
    """A tag whose type the head was not trained on is an error naming its file and line."""
    known = set(label_names)
    types = sorted({split_tag(name)[1] for name in label_names} - {None})
    for s, (_, tags) in enumerate(sentences):
        for w, tag in enumerate(tags):
            if tag not in known:
                raise LayerfuseError(f"{_where(path, s, w)}: entity type {split_tag(tag)[1]!r} is not one the "
                                      f"head was trained on (types: {', '.join(types) or 'none'})")


def span_report(gold: list[list[str]], pred: list[list[str]], label_names: list[str]) -> dict:
    """``{"types": {type: {precision, recall, f1, support}}, "micro": {...}}`` over entity spans;
    support = gold entities of the type. Zero where there is nothing to divide by (seqeval's
    ``zero_division=0``)."""
    ids = {name: i for i, name in enumerate(label_names)}
    counts = np.array([len(tags) for tags in gold], dtype=np.int64)
    chunker = Chunker(label_names)
    gold_spans = chunker(np.array([ids[t] for tags in gold for t in tags], dtype=np.int64), counts)
    pred_spans = chunker(np.array([ids[t] for tags in pred for t in tags], dtype=np.int64), counts)
    types = sorted({span[0] for span in gold_spans | pred_spans})
    report = {"types": {t: _scores({s for s in gold_spans if s[0] == t}, {s for s in pred_spans if s[0] == t})
                        for t in types},
              "micro": _scores(gold_spans, pred_spans)}
    report["micro"]["f1"] = entity_f1(gold_spans, pred_spans)  # the training evaluation's number, as it computes it
    return report


def _scores(gold: set, pred: set) -> dict:
    tp = len(gold & pred)
    p = tp / len(pred) if pred else 0.0
    r = tp / len(gold) if gold else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if tp else 0.0, "support": len(gold)}


def format_report(report: dict) -> str:
    """The report as a table, percentages like conlleval's."""
    rows = [*report["types"].items(), ("micro avg", report["micro"])]
    width = max(len(name) for name, _ in rows)
    lines = [f"{'type':<{width}}  precision  recall      f1  support"]
    for name, s in rows:
        lines.append(f"{name:<{width}}  {100 * s['precision']:9.2f}  {100 * s['recall']:6.2f}  "
                     f"{100 * s['f1']:6.2f}  {s['support']:7d}")
    return "\n".join(lines)


def conll_lines(sentences: list[Sentence], pred: list[list[str]]):
    """``word gold pred`` lines, a blank line after each sentence."""
    for (words, gold), tags in zip(sentences, pred):
        for word, g, p in zip(words, gold, tags):
            yield f"{word} {g} {p}"
        yield ""
