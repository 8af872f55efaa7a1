"""Hub datasets: the CoNLL-2003 and WikiAnn aliases read script-free Parquet exports, never a
script repository; offline they fail at once in one line. No test touches the network: a
stand-in for ``datasets.load_dataset`` returns tables with the real features of each source."""

import os

# No network in tests: HF libraries read these when first imported.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import pytest

from layerfuse.errors import LayerfuseError
from layerfuse.extract import hub_datasets
from layerfuse.extract.datasets import load_dataset

datasets = pytest.importorskip("datasets")

NER_NAMES = {
    "conll2003": ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"],
    "wikiann": ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"],
}
POS_NAMES = [
    '"', "''", "#", "$", "(", ")", ",", ".", ":", "``", "CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR",
    "JJS", "LS", "MD", "NN", "NNP", "NNPS", "NNS", "NN|SYM", "PDT", "POS", "PRP", "PRP$", "RB", "RBR",
    "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP", "WP$", "WRB",
]
CHUNK_NAMES = [
    "O", "B-ADJP", "I-ADJP", "B-ADVP", "I-ADVP", "B-CONJP", "I-CONJP", "B-INTJ", "I-INTJ", "B-LST",
    "I-LST", "B-NP", "I-NP", "B-PP", "I-PP", "B-PRT", "I-PRT", "B-SBAR", "I-SBAR", "B-UCP", "I-UCP",
    "B-VP", "I-VP",
]
SCRIPT_NAMES = {"conll2003", "wikiann"}  # the bare names whose repositories hold a loading script

# (tokens, ner_tags ids) per split; ids follow each source's ClassLabel order.
CONLL_ROWS = {
    "train": [(["EU", "rejects", "German", "call"], [3, 0, 7, 0]), (["Peter", "Blackburn"], [1, 2])],
    "validation": [(["CRICKET", "-", "LEICESTERSHIRE"], [0, 0, 3])],
    "test": [(["SOCCER", "-", "JAPAN"], [0, 0, 5]), ([], [])],
}
WIKIANN_ROWS = {
    "train": [(["Sam", "Harris", "visited", "Paris"], [1, 2, 0, 5]), (["Acme", "Corp"], [3, 4])],
    "validation": [(["in", "New", "York"], [0, 5, 6])],
    "test": [(["Bob"], [1])],
}


def _seq(feature):
    return datasets.Sequence(feature)


def conll2003_dict():
    """A DatasetDict with CoNLL-2003's real columns, features and split names."""
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "tokens": _seq(datasets.Value("string")),
            "pos_tags": _seq(datasets.ClassLabel(names=POS_NAMES)),
            "chunk_tags": _seq(datasets.ClassLabel(names=CHUNK_NAMES)),
            "ner_tags": _seq(datasets.ClassLabel(names=NER_NAMES["conll2003"])),
        }
    )
    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict(
                {
                    "id": [str(i) for i in range(len(rows))],
                    "tokens": [words for words, _ in rows],
                    "pos_tags": [[21] * len(words) for words, _ in rows],
                    "chunk_tags": [[11] * len(words) for words, _ in rows],
                    "ner_tags": [ids for _, ids in rows],
                },
                features=features,
            )
            for split, rows in CONLL_ROWS.items()
        }
    )


def wikiann_dict(lang: str = "en"):
    """A DatasetDict with WikiAnn's real columns, features and split names."""
    features = datasets.Features(
        {
            "tokens": _seq(datasets.Value("string")),
            "ner_tags": _seq(datasets.ClassLabel(names=NER_NAMES["wikiann"])),
            "langs": _seq(datasets.Value("string")),
            "spans": _seq(datasets.Value("string")),
        }
    )
    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict(
                {
                    "tokens": [words for words, _ in rows],
                    "ner_tags": [ids for _, ids in rows],
                    "langs": [[lang] * len(words) for words, _ in rows],
                    "spans": [["PER: " + words[0]] for words, _ in rows],
                },
                features=features,
            )
            for split, rows in WIKIANN_ROWS.items()
        }
    )


class StandIn:
    """Records every ``load_dataset`` call and answers with ``reply(args, kwargs)``."""

    def __init__(self, reply):
        self.reply = reply
        self.calls: list[tuple[tuple, dict]] = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.reply(args, kwargs)


def _never_a_script(calls):
    for args, kwargs in calls:
        assert "trust_remote_code" not in kwargs
        assert args and args[0] not in SCRIPT_NAMES, f"a script repository was asked for: {args[0]!r}"
        if args[0] in (hub_datasets.CONLL2003_REPO, hub_datasets.WIKIANN_REPO):
            assert kwargs.get("revision") == "refs/convert/parquet"


@pytest.fixture
def online(monkeypatch):
    """The hub counts as reachable; ``load_dataset`` is a recording stand-in set by the test."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(hub_datasets, "hub_reachable", lambda: True)

    def install(reply):
        stand_in = StandIn(reply)
        monkeypatch.setattr(datasets, "load_dataset", stand_in)
        return stand_in

    return install


@pytest.mark.parametrize("spec", ["conll03", "conll2003"])
def test_conll2003_reads_the_parquet_export(online, spec):
    stand_in = online(lambda args, kwargs: conll2003_dict())
    ds = load_dataset(spec)
    assert stand_in.calls == [
        (
            ("eriktks/conll2003",),
            {
                "revision": "refs/convert/parquet",
                "data_files": {
                    "train": "conll2003/train/*.parquet",
                    "validation": "conll2003/validation/*.parquet",
                    "test": "conll2003/test/*.parquet",
                },
            },
        )
    ]
    _never_a_script(stand_in.calls)
    assert ds.name == "conll2003"
    assert ds.source == "hf:eriktks/conll2003@refs/convert/parquet:conll2003"
    assert list(ds.splits) == ["train", "dev", "test"]
    assert ds.splits["train"] == [
        (["EU", "rejects", "German", "call"], ["B-ORG", "O", "B-MISC", "O"]),
        (["Peter", "Blackburn"], ["B-PER", "I-PER"]),
    ]
    assert ds.splits["dev"] == [(["CRICKET", "-", "LEICESTERSHIRE"], ["O", "O", "B-ORG"])]
    assert ds.splits["test"] == [(["SOCCER", "-", "JAPAN"], ["O", "O", "B-LOC"])]  # the empty row dropped
    assert ds.label_names == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert ds.source_scheme == "iob2"
    assert ds.unseen_in_train == {"dev": 0, "test": 1}  # LOC is absent from this train split


@pytest.mark.parametrize("lang", ["en", "de", "bat-smg"])
def test_wikiann_reads_one_language_of_the_parquet_export(online, lang):
    stand_in = online(lambda args, kwargs: wikiann_dict(lang))
    ds = load_dataset(f"wikiann:{lang}", splits=["validation"])
    assert stand_in.calls == [
        (
            ("unimelb-nlp/wikiann",),
            {
                "revision": "refs/convert/parquet",
                "data_files": {
                    "train": f"{lang}/train/*.parquet",
                    "validation": f"{lang}/validation/*.parquet",
                    "test": f"{lang}/test/*.parquet",
                },
            },
        )
    ]
    _never_a_script(stand_in.calls)
    assert ds.name == f"wikiann-{lang}"
    assert ds.source == f"hf:unimelb-nlp/wikiann@refs/convert/parquet:{lang}"
    assert list(ds.splits) == ["dev"]
    assert ds.splits["dev"] == [(["in", "New", "York"], ["O", "B-LOC", "I-LOC"])]
    assert ds.label_names == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


def test_other_hub_names_pass_through(online):
    stand_in = online(lambda args, kwargs: wikiann_dict())
    ds = load_dataset("someone/some-ner")
    assert stand_in.calls == [(("someone/some-ner",), {})]
    assert ds.name == "some-ner"
    assert ds.source == "hf:someone/some-ner"
    assert list(ds.splits) == ["train", "dev", "test"]


def test_the_export_layout_selects_one_language(online, tmp_path):
    """The data_files patterns, given to the real ``load_dataset`` over a local folder laid out
    like the export (``<lang>/<split>/0000.parquet``), pick one language and keep the ClassLabel
    that Parquet files written by ``datasets`` carry in their schema metadata."""
    real_load = datasets.load_dataset
    export = tmp_path / "export"
    for lang in ("en", "de"):
        for split, table in wikiann_dict(lang).items():
            (export / lang / split).mkdir(parents=True)
            table.to_parquet(str(export / lang / split / "0000.parquet"))

    def from_local_copy(args, kwargs):
        assert args == ("unimelb-nlp/wikiann",) and kwargs["revision"] == "refs/convert/parquet"
        return real_load(str(export), data_files=kwargs["data_files"], cache_dir=str(tmp_path / "cache"))

    online(from_local_copy)
    ds = load_dataset("wikiann:de")
    assert {split: len(sentences) for split, sentences in ds.splits.items()} == {"train": 2, "dev": 1, "test": 1}
    assert ds.splits["train"][0] == (["Sam", "Harris", "visited", "Paris"], ["B-PER", "I-PER", "O", "B-LOC"])


@pytest.mark.parametrize("spec", ["wikiann:", "wikiann:EN", "wikiann:../en", "wikiann:e*"])
def test_bad_wikiann_language_is_one_line_naming_it(online, spec):
    stand_in = online(lambda args, kwargs: pytest.fail("load_dataset must not be called"))
    with pytest.raises(LayerfuseError) as info:
        load_dataset(spec)
    message = str(info.value)
    assert "\n" not in message and repr(spec) in message
    assert stand_in.calls == []


@pytest.mark.parametrize(
    ("spec", "route"),
    [
        ("conll03", "pass a directory with eng.train/eng.testa/eng.testb (CoNLL-2003 files) instead"),
        ("wikiann:en", "pass a directory with WikiAnn train/dev/test files (lines 'lang:word TAG') instead"),
    ],
)
@pytest.mark.parametrize("how", ["no-network", "offline-flag", "cache-miss"])
def test_offline_is_one_line_naming_the_local_route(monkeypatch, spec, route, how):
    calls = []

    def cache_miss(*args, **kwargs):
        calls.append((args, kwargs))
        raise ConnectionError(f"Couldn't reach '{args[0]}' on the Hub (OfflineModeIsEnabled)\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", cache_miss)
    if how == "no-network":  # no flags set, the probe fails
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
        monkeypatch.setattr(hub_datasets, "hub_reachable", lambda: False)
    elif how == "offline-flag":  # the flag set after `datasets` was imported without it
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    else:  # offline from the start: the local HF cache is asked, and holds nothing
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(LayerfuseError) as info:
        load_dataset(spec)
    assert str(info.value) == f"dataset {spec!r} needs the HF hub, which is unreachable; {route}"
    if how == "cache-miss":  # the cache is looked up with the same script-free arguments
        assert len(calls) == 1
        _never_a_script(calls)
        assert calls[0][1]["revision"] == "refs/convert/parquet"
    else:
        assert calls == []


def test_offline_cache_hit_loads_the_same_source(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_datasets, "hub_reachable", lambda: pytest.fail("offline must not probe the hub"))
    stand_in = StandIn(lambda args, kwargs: conll2003_dict())
    monkeypatch.setattr(datasets, "load_dataset", stand_in)
    ds = load_dataset("conll03")
    assert [args for args, _ in stand_in.calls] == [("eriktks/conll2003",)]
    _never_a_script(stand_in.calls)
    assert ds.fingerprint() == load_dataset("conll2003").fingerprint()


def test_a_missing_language_is_not_called_unreachable(online):
    """Online, files the hub does not have are named as such, not blamed on the network."""
    from datasets.exceptions import DataFilesNotFoundError

    def missing(args, kwargs):
        raise DataFilesNotFoundError("No (supported) data files found in unimelb-nlp/wikiann\nmore")

    online(missing)
    with pytest.raises(LayerfuseError) as info:
        load_dataset("wikiann:xx")
    assert str(info.value) == (
        "could not load dataset 'wikiann:xx' from the HF hub: "
        "DataFilesNotFoundError: No (supported) data files found in unimelb-nlp/wikiann"
    )


@pytest.mark.parametrize("error", ["LocalEntryNotFoundError", "TimeoutError", "ConnectionResetError"])
def test_a_connection_dropped_while_loading_is_unreachable(online, error):
    from huggingface_hub.errors import LocalEntryNotFoundError

    kinds = {
        "LocalEntryNotFoundError": LocalEntryNotFoundError,
        "TimeoutError": TimeoutError,
        "ConnectionResetError": ConnectionResetError,
    }

    def drop(args, kwargs):
        raise kinds[error]("the connection went away")

    online(drop)
    with pytest.raises(LayerfuseError, match=r"^dataset 'conll03' needs the HF hub, which is unreachable; "):
        load_dataset("conll03")
