"""Dataset readers: every tagged source (NER sets, UD treebanks) becomes one :class:`TaggedDataset` of
words and their tags (span sets in IOB2).

``load_dataset(spec)`` asks the registered formats (:mod:`layerfuse.extract.formats`, one module per
format family) in order: the first that claims ``spec`` reads it. Out of the box: a UD treebank, the
names ``wnut16``/``default`` (the built-in WNUT-16), a HF ``save_to_disk`` folder, a folder of
CoNLL-style or WikiAnn files, one CoNLL-style file, and anything else as a HF hub name; a path that is
not there is an error, never a hub name.

How fields are read (:class:`Reading`) is an argument of :func:`load_dataset`, or, for every load of
a block of code (a command that loads its dataset more than once), the :func:`reading` context.
"""

from __future__ import annotations

from layerfuse.errors import removed_names
from layerfuse.extract.formats import Request, find_format
from layerfuse.extract.iob import normalise_scheme
from layerfuse.extract.reading import Reading, parse_columns
from layerfuse.extract.tagged import LabelColumn, TaggedDataset

__getattr__ = removed_names(__name__, {"NerDataset": "layerfuse.extract.datasets.TaggedDataset"})
__all__ = ["LabelColumn", "Reading", "TaggedDataset", "load_dataset", "parse_columns"]


def load_dataset(spec: str, *, splits: list[str] | None = None, scheme: str = "auto",
                 read: Reading | None = None) -> TaggedDataset:
    """Read ``spec`` with the first registered format that claims it into a TaggedDataset.

    ``splits`` keeps only the named splits (aliases such as ``validation`` allowed); label names
    and ``unseen_in_train`` are still computed over every split, so label ids do not depend on
    the filter. ``scheme`` forces the source tag scheme instead of detecting it. ``read``: which
    columns or fields hold words and tags (default: `Reading()`, the word first and the tag last).
    """
    normalise_scheme(scheme)  # fail on a bad name before reading anything
    read = read or Reading()
    read.column_map()  # a bad --columns fails before anything is read
    request = Request(spec, read, splits, scheme)
    return find_format(request).load(request)
