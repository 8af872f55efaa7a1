"""Where a hub dataset name is fetched from, and fetching it without ever running a script.

``datasets`` 4.0 dropped dataset scripts: ``load_dataset("conll2003")`` now fails with "Dataset
scripts are no longer supported, but found conll2003.py", and ``trust_remote_code`` is refused.
CoNLL-2003 (``eriktks/conll2003``, where the old canonical name ``conll2003`` redirects) is such a
script repository, and WikiAnn (``unimelb-nlp/wikiann``, formerly ``wikiann``) was one. Both have
a hub-made Parquet export on the ``refs/convert/parquet`` revision, laid out
``<config>/<split>/NNNN.parquet``, whose files carry the ``datasets`` features (``ner_tags`` as a
sequence of ``ClassLabel``) in their schema metadata. So the aliases read those files by name:
that revision holds no script, and naming the files keeps one WikiAnn language from being mixed
with the 175 others on the same branch.

Any other hub name is passed to ``load_dataset`` as given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from layerfuse.errors import LayerfuseError
from layerfuse.hub import env_offline, hub_reachable

PARQUET_REVISION = "refs/convert/parquet"
HUB_SPLITS = ("train", "validation", "test")  # the split folders of both exports
CONLL2003_REPO = "eriktks/conll2003"
CONLL2003_CONFIG = "conll2003"
WIKIANN_REPO = "unimelb-nlp/wikiann"
CONLL2003_ALIASES = ("conll03", "conll2003")
# WikiAnn configs: "en", "ast", "bat-smg", "zh-min-nan", "simple", ... The code becomes a path in
# a glob, so nothing else is let through.
_WIKIANN_LANG = re.compile(r"[a-z]+(?:-[a-z]+)*")


@dataclass(frozen=True)
class HubSource:
    """What ``datasets.load_dataset`` is asked for, and the short name the dataset gets.

    ``config`` names the export folder the files come from; it is recorded in ``source`` and not
    passed on, since naming the files already picks it.
    """

    name: str
    repo: str
    config: str | None = None
    revision: str | None = None
    data_files: dict[str, str] | None = None

    def load_args(self) -> tuple[tuple[str, ...], dict[str, object]]:
        """Positional and keyword arguments of ``datasets.load_dataset``."""
        kwargs: dict[str, object] = {}
        if self.revision is not None:
            kwargs["revision"] = self.revision
        if self.data_files is not None:
            kwargs["data_files"] = dict(self.data_files)
        return (self.repo,), kwargs

    @property
    def source(self) -> str:
        """The provenance recorded with the dataset: ``hf:REPO[@REVISION][:CONFIG]``."""
        revision = f"@{self.revision}" if self.revision else ""
        config = f":{self.config}" if self.config else ""
        return f"hf:{self.repo}{revision}{config}"


def _parquet_export(name: str, repo: str, config: str) -> HubSource:
    files = {split: f"{config}/{split}/*.parquet" for split in HUB_SPLITS}
    return HubSource(name=name, repo=repo, config=config, revision=PARQUET_REVISION, data_files=files)


def hub_source(spec: str) -> HubSource:
    """Map a hub spec to the repository, revision and files that load without a script."""
    if spec in CONLL2003_ALIASES:
        return _parquet_export("conll2003", CONLL2003_REPO, CONLL2003_CONFIG)
    if spec.startswith("wikiann:"):
        lang = spec.split(":", 1)[1]
        if not lang:
            raise LayerfuseError(f"dataset {spec!r}: give a language, e.g. 'wikiann:en'")
        if not _WIKIANN_LANG.fullmatch(lang):
            raise LayerfuseError(
                f"dataset {spec!r}: {lang!r} is not a WikiAnn language code (lowercase, e.g. 'en' or 'bat-smg')"
            )
        return _parquet_export(f"wikiann-{lang}", WIKIANN_REPO, lang)
    return HubSource(name=spec.rstrip("/").rsplit("/", 1)[-1], repo=spec)


def unreachable(spec: str) -> LayerfuseError:
    """The message for a hub dataset we cannot fetch, naming the local alternative."""
    if spec in CONLL2003_ALIASES:
        hint = "a directory with eng.train/eng.testa/eng.testb (CoNLL-2003 files)"
    elif spec.startswith("wikiann:"):
        hint = "a directory with WikiAnn train/dev/test files (lines 'lang:word TAG')"
    else:
        hint = "a local directory (CoNLL files, WikiAnn files or a datasets save_to_disk directory)"
    return LayerfuseError(f"dataset {spec!r} needs the HF hub, which is unreachable; pass {hint} instead")


def one_line(err: BaseException) -> str:
    """One line of an exception for a one-line error message."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def load_hub(spec: str):
    """(short name, source, the loaded DatasetDict) for a hub spec, from the hub or the local HF
    cache when offline; never blocks on a dead network."""
    source = hub_source(spec)
    import datasets

    if env_offline():
        if not datasets.config.HF_HUB_OFFLINE:  # set after import: the library would still dial out
            raise unreachable(spec)
    elif not hub_reachable():
        raise unreachable(spec)
    args, kwargs = source.load_args()
    try:
        loaded = datasets.load_dataset(*args, **kwargs)
    except Exception as err:  # offline cache miss, unknown name or language, connection drop, ...
        if env_offline() or _network_failure(err):
            raise unreachable(spec) from None
        raise LayerfuseError(f"could not load dataset {spec!r} from the HF hub: {one_line(err)}") from None
    return source.name, source.source, loaded


def _network_failure(err: BaseException) -> bool:
    """True for a dropped connection; False for a name, language or file the hub does not have
    (``DatasetNotFoundError``, ``DataFilesNotFoundError``: both ``FileNotFoundError``), which
    must not be reported as an unreachable hub."""
    from huggingface_hub.utils import LocalEntryNotFoundError  # a download that found no network

    if isinstance(err, (ConnectionError, TimeoutError, LocalEntryNotFoundError)):
        return True
    return isinstance(err, OSError) and not isinstance(err, FileNotFoundError)
