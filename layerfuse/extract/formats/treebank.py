"""Universal Dependencies treebanks (see :mod:`layerfuse.extract.conllu`): a folder of
``*-ud-{train,dev,test}.conllu`` or ``train/dev/test.conllu`` files where no CoNLL-style train file is,
or one ``.conllu`` file (a train split alone). The syntactic words with UPOS as the primary label
set and XPOS and DEPREL beside it, all token-level."""

from __future__ import annotations

from pathlib import Path

from layerfuse.cache.label_sets import TOKEN
from layerfuse.errors import LayerfuseError
from layerfuse.extract.assemble import class_names, ordered, select, unseen_classes
from layerfuse.extract.conllu import LABEL_COLUMNS, read_conllu, treebank_files
from layerfuse.extract.tagged import LabelColumn, TaggedDataset, content_hash

from .conll import find_split_file
from .registry import DatasetFormat, Request


def _files(request: Request) -> dict[str, Path]:
    """The treebank's file per split; {} when ``request`` is no treebank."""
    path = request.path
    if path.is_file():
        return {"train": path} if path.suffix == ".conllu" else {}
    return treebank_files(path) if path.is_dir() and find_split_file(path, "train") is None else {}


def _load(request: Request) -> TaggedDataset:
    return _build_treebank(request.path, _files(request), keep=request.splits)


def _build_treebank(where: Path, files: dict[str, Path], *, keep: list[str] | None) -> TaggedDataset:
    """A UD treebank as a dataset of syntactic words: UPOS is the primary label set (it fixes the
    entry key with the words), XPOS and DEPREL come beside it; every set is token-level. A folder
    must have a train file, as a CoNLL folder must."""
    if "train" not in files:
        raise LayerfuseError(f"{where}: no CoNLL-U train file (*-ud-train.conllu or train.conllu); it holds "
                              f"{', '.join(sorted(p.name for p in files.values()))}")
    treebank = {split: read_conllu(path) for split, path in files.items()}
    splits = {split: [(s.words, s.upos) for s in sentences] for split, sentences in ordered(treebank).items()}
    chosen = select(splits, keep, name=where.name)
    columns = {}
    for column in LABEL_COLUMNS[1:]:
        tags = {split: [s.labels(column) for s in sentences] for split, sentences in treebank.items()}
        columns[column] = LabelColumn(TOKEN, class_names(tags.values()), tags)  # every split read, as CoNLL's
    upos = class_names([[tags for _, tags in sentences] for sentences in splits.values()])
    unseen = unseen_classes(splits)
    dataset = TaggedDataset(name=where.stem if where.is_file() else where.name, source=str(where),
                            splits={s: splits[s] for s in chosen}, label_names=upos,
                            unseen_in_train={s: sum(n.values()) for s, n in unseen.items() if s in chosen},
                            unseen_types={s: sorted(n) for s, n in unseen.items() if s in chosen and n},
                            source_scheme="none", primary=LABEL_COLUMNS[0], primary_kind=TOKEN, label_sets=columns)
    dataset._fingerprints[""] = content_hash(upos, splits)
    return dataset


UD_TREEBANK = DatasetFormat(
    name="ud-treebank", help="Universal Dependencies treebank directory or .conllu file",
    claims=lambda request: bool(_files(request)), load=_load, what="a Universal Dependencies treebank")
