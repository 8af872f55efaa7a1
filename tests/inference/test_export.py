"""`layerfuse export`: a head and its backbone as one transformers model. Loaded back with
`AutoModelForTokenClassification` and used in ``pipeline("token-classification")``, it tags what
`predict` tags, and its logits at each word's first token are the head's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from layerfuse.cache.reader import open_entry
from layerfuse.cli.main import main as cli
from layerfuse.extract.run import ExtractConfig, extract
from layerfuse.hf.export import export_head
from layerfuse.inference import Predictor, entities, split_words
from layerfuse.training import TrainConfig, train_head
from layerfuse.training.checkpoint import save_checkpoint
from layerfuse.training.data import load_data

pytestmark = pytest.mark.usefixtures("one_thread")

# Multi-subword words ("Carolson", "Globex"), punctuation, and a sentence longer than the backbone's positions.
TEXTS = ["Alice met Bobson in Paris, and Acme Inc visited Berlin today.",
         "Carolson of Globex said Rome is big.",
         "the new Hooli",
         # longer than the tiny BERT's 32 positions: windows, as predict encodes it
         "Alice met Bobson in Paris and Carolson visited Berlin with Grace from Globex and Heidi of Hooli today, "
         "and Frank met Daveson in Oslo with Erin of Acme Inc.",
         # special tokens' spellings are text to both (the pipeline's tokenizer read them as those tokens)
         "Alice typed [MASK] and [SEP] then [CLS] Bobson met [UNK] Carolson in [PAD] Paris.",
         # words BERT's normalizer deletes whole (a lone accent, U+FFFD, a private-use character): the pipeline
         # never sees them, so predict leaves them out too
         "Alice \u0301 Bobson met \ufffd Carolson in \ue000 Paris."]


@pytest.fixture(scope="module")
def subword_cache(tiny_bert_dir, tiny_conll_dir, tmp_path_factory):
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), granularity="subword",
                           cache_dir=str(tmp_path_factory.mktemp("cache")), unit_rows=256, splits=("train", "dev"))
    return extract(config, progress=False, log=lambda m: None).path


@pytest.fixture(scope="module")
def mean_cache(tiny_bert_dir, tiny_conll_dir, tmp_path_factory):
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), pooling="mean",
                           cache_dir=str(tmp_path_factory.mktemp("cache")), unit_rows=256, splits=("train", "dev"))
    return extract(config, progress=False, log=lambda m: None).path


def _head(cache: str, fusion: str, folder) -> str:
    """A head trained a few epochs (enough for entities to appear), saved with a run record beside it
    as train-head writes them; returns the run record's path."""
    entry = open_entry(cache)
    data = load_data(entry)
    result = train_head(TrainConfig(fusion=fusion, shots=None, epochs=4, seed=0, lr=1e-2), data)
    stem = str(folder / fusion)
    weights, _ = save_checkpoint(stem + ".head", result.tagger, tagger_kwargs=result.tagger_kwargs,
                                 layers=result.layers, label_names=data.label_names, cache_meta=data.meta,
                                 cache_path=entry.path, config=result.config)
    record = {"config": result.config.record() if hasattr(result.config, "record") else result.config,
              "best_dev_f1": result.best_dev_f1, "test_f1_at_best": result.test_f1_at_best, "checkpoint": weights}
    with open(stem + ".json", "w", encoding="utf-8") as f:
        json.dump(record, f)
    return stem + ".json"


CASES = [("word", "concat"), ("word", "dwatt"), ("word", "extra"), ("word", "scalarmix"),
         ("subword", "concat"), ("subword", "extra"), ("mean", "dwatt")]


@pytest.fixture(scope="module")
def exported():
    """{(cache, fusion): (run record, exported folder)}, built once for the module."""
    return {}


def _exported(case, request, tmp_path_factory, store):
    if case not in store:
        cache = {"word": "tiny_cache", "subword": "subword_cache", "mean": "mean_cache"}[case[0]]
        folder = tmp_path_factory.mktemp("runs")
        run = _head(request.getfixturevalue(cache), case[1], folder)
        store[case] = run, export_head(run, str(folder / "exported"))
    return store[case]


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_exported_model_tags_as_predict(case, request, tmp_path_factory, exported):
    from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

    run, folder = _exported(case, request, tmp_path_factory, exported)
    predictor = Predictor(run.removesuffix(".json") + ".head", device="cpu")
    words = [[w for w, _, _ in predictor.words(t)] for t in TEXTS]
    assert len(words[-1]) == len(split_words(TEXTS[-1])) - 3
    tags = predictor.tag(words)
    assert any(t != "O" for sentence in tags for t in sentence), "the head tags nothing: a weak comparison"

    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert type(model).__name__ == "LayerfuseForTokenClassification"
    # The first token of each word carries the head's logits for that word, exactly.
    with torch.inference_mode():
        hidden, mask = predictor.backbone(words, predictor.layers)
        head_logits = predictor.head(hidden, mask)  # [B, T, C] per row (word, or subword)
        enc = tokenizer(words, is_split_into_words=True, return_tensors="pt", padding=True)
        word_ids = torch.tensor([[-1 if w is None else w for w in enc.word_ids(b)] for b in range(len(words))])
        by_ids = model(**enc, word_ids=word_ids).logits
        by_vocab = model(**enc).logits  # word starts read off the vocabulary: the same words here
    assert enc["input_ids"].shape[1] > model.config.max_length  # the long sentence does take windows
    from layerfuse.extract.tokenize import tokenize_words

    rows = predictor._word_rows(words, tokenize_words(predictor.backbone.tokenizer, words))
    for b, sentence in enumerate(words):
        first = [word_ids[b].tolist().index(i) for i in range(len(sentence))]
        torch.testing.assert_close(by_ids[b, first], head_logits[b, rows[b]], atol=1e-5, rtol=1e-4)
        assert [model.config.id2label[int(i)] for i in by_ids[b, first].argmax(-1)] == tags[b]
    torch.testing.assert_close(by_vocab, by_ids)

    # The pipeline's entities are predict's: same types, same character spans.
    ner = pipeline("token-classification", model=folder, aggregation_strategy="simple", device="cpu")
    for text, sentence_tags in zip(TEXTS, tags):
        ours = entities(sentence_tags, predictor.words(text), text)
        theirs = ner(text)
        assert [(e["entity_group"], e["start"], e["end"]) for e in theirs] == \
            [(e["type"], *e["chars"]) for e in ours]
    first = pipeline("token-classification", model=folder, aggregation_strategy="first", device="cpu")
    assert [[(e["entity_group"], e["start"], e["end"]) for e in first(t)] for t in TEXTS] == \
        [[(e["entity_group"], e["start"], e["end"]) for e in ner(t)] for t in TEXTS]


def test_round_trip_and_model_card(request, tmp_path_factory, exported, tmp_path):
    from transformers import AutoModelForTokenClassification

    run, folder = _exported(("word", "concat"), request, tmp_path_factory, exported)
    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    model.save_pretrained(tmp_path / "again")
    again = AutoModelForTokenClassification.from_pretrained(tmp_path / "again").eval()
    ids = torch.tensor([[2, 40, 41, 3]])
    torch.testing.assert_close(again(input_ids=ids).logits, model(input_ids=ids).logits)
    as_tuple = model(input_ids=ids, return_dict=False)  # the transformers convention
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], model(input_ids=ids).logits)
    # Loaded in bfloat16 (or cast to it) the head runs in that dtype: it failed on float32 hidden states.
    half = AutoModelForTokenClassification.from_pretrained(folder, dtype=torch.bfloat16).eval()
    torch.testing.assert_close(half(input_ids=ids).logits.float(), model(input_ids=ids).logits, atol=0.1, rtol=0.1)
    assert model.to(torch.bfloat16)(input_ids=ids).logits.dtype == torch.bfloat16
    files = set(os.listdir(folder))
    assert {"config.json", "model.safetensors", "README.md", "tokenizer_config.json"} <= files
    config = json.loads(open(os.path.join(folder, "config.json")).read())
    tokenizer_config = json.loads(open(os.path.join(folder, "tokenizer_config.json")).read())
    assert "local_files_only" not in tokenizer_config and "is_local" not in tokenizer_config
    assert config["model_type"] == "layerfuse-tagger" and "auto_map" not in config
    assert config["id2label"]["0"] in model.config.label2id
    card = open(os.path.join(folder, "README.md")).read()
    record = json.loads(open(run).read())
    assert "pipeline_tag: token-classification" in card and "concat" in card
    assert f"{100 * record['best_dev_f1']:.1f}" in card
    assert "/tmp" not in card and str(tmp_path_factory.getbasetemp()) not in json.dumps(config)


def test_loads_in_a_fresh_process_after_import_layerfuse(request, tmp_path_factory, exported):
    """`import layerfuse` is all it takes: the auto classes learn the model type when transformers loads."""
    _, folder = _exported(("word", "concat"), request, tmp_path_factory, exported)
    script = ("import layerfuse, sys\n"
              "from transformers import pipeline\n"
              "p = pipeline('token-classification', model=sys.argv[1], aggregation_strategy='simple', device='cpu')\n"
              "print(type(p.model).__name__)\n")
    out = subprocess.run([sys.executable, "-c", script, folder], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("LayerfuseForTokenClassification")


def test_export_command(request, tmp_path_factory, exported, tmp_path):
    run, _ = _exported(("word", "concat"), request, tmp_path_factory, exported)
    out = CliRunner().invoke(cli, ["export", run, "--out", str(tmp_path / "model")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "model" / "model.safetensors").is_file() and str(tmp_path / "model") in out.output
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    bad = CliRunner().invoke(cli, ["export", run, "--out", str(tmp_path / "busy")])
    assert bad.exit_code == 1 and bad.output.count("\n") == 1 and "busy" in bad.output
    again = CliRunner().invoke(cli, ["export", run, "--out", str(tmp_path / "model")])  # the same head: a rerun
    assert again.exit_code == 0, again.output
    other, _ = _exported(("word", "dwatt"), request, tmp_path_factory, exported)
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "config.json").write_text('{"mine": 1}')
    for folder, what in (("model", "another head's exported model"), ("theirs", "files that are not this head's")):
        refused = CliRunner().invoke(cli, ["export", other, "--out", str(tmp_path / folder)])
        assert refused.exit_code == 1 and what in refused.output, refused.output
    assert (tmp_path / "theirs" / "config.json").read_text() == '{"mine": 1}'
    missing = CliRunner().invoke(cli, ["export", str(tmp_path / "nope.head"), "--out", str(tmp_path / "m2")])
    assert missing.exit_code == 1 and missing.output.startswith("error: ") and "nope.head" in missing.output
    record = CliRunner().invoke(cli, ["export", str(tmp_path / "nope.json"), "--out", str(tmp_path / "m2")])
    assert record.output == f"error: no head at {tmp_path / 'nope.json'}: the file does not exist\n"  # not .safetensors
    folder = CliRunner().invoke(cli, ["export", str(tmp_path / "theirs"), "--out", str(tmp_path / "m2")])
    assert folder.exit_code == 1 and "is a folder, not a head" in folder.output, folder.output


def test_export_on_a_full_disk_leaves_no_half_made_model(request, tmp_path_factory, exported, tmp_path, monkeypatch):
    """safetensors' own error for a full disk ("File too large (os error 27)") was a 35-line traceback,
    and --out was left holding a config and no weights: now one line naming the file, --out untouched."""
    from layerfuse.hf.modeling import LayerfuseForTokenClassification

    run, _ = _exported(("word", "concat"), request, tmp_path_factory, exported)

    def full(self, folder, **kwargs):
        (tmp_path / "seen").write_text(str(folder))
        with open(os.path.join(folder, "config.json"), "w") as f:
            f.write("{}")
        raise RuntimeError("Error while serializing: IoError(Os { code: 27, kind: FileTooLarge, message: "
                           "\"File too large\" }) (os error 27)")

    monkeypatch.setattr(LayerfuseForTokenClassification, "save_pretrained", full)
    out = CliRunner().invoke(cli, ["export", run, "--out", str(tmp_path / "model")])
    assert out.exit_code == 1 and "Traceback" not in out.output, out.output
    assert out.output.strip() == f"error: File too large ({tmp_path / 'model' / 'model.safetensors'})"
    assert not (tmp_path / "model").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seen"]  # the folder it wrote into is gone too

    # the tokenizer's and the card's own writes: tokenizers' full disk is a bare Exception (a 41-line
    # traceback), the card's named no file
    monkeypatch.undo()
    from layerfuse.hf import export

    def no_room(*args, **kwargs):
        raise Exception("No space left on device (os error 28)")
    def config_full(*args, **kwargs):  # transformers' own write of config.json, named in the work folder
        import errno

        raise OSError(errno.ENOSPC, "No space left on device", os.path.join(args[-1], "config.json"))
    monkeypatch.setattr(LayerfuseForTokenClassification, "save_pretrained",
                        lambda self, folder, **kwargs: config_full(folder))
    out = CliRunner().invoke(cli, ["export", run, "--out", str(tmp_path / "model")])
    assert out.output.strip() == f"error: No space left on device ({tmp_path / 'model' / 'config.json'})", out.output
    monkeypatch.undo()
    for name, failing in (("tokenizer.json", "_save_tokenizer"), ("README.md", "model_card")):
        with monkeypatch.context() as patch:
            patch.setattr(export, failing, no_room if failing != "model_card" else _full_card)
            out = CliRunner().invoke(cli, ["export", run, "--out", str(tmp_path / "model")])
        assert out.output.strip() == f"error: No space left on device ({tmp_path / 'model' / name})", out.output
        assert not (tmp_path / "model").exists()


def _full_card(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_importing_the_model_module_first_registers_it_without_a_warning():
    """`layerfuse.hf.modeling` imports transformers' auto classes, which fire the registration hook while
    the module is half defined: it must register itself once defined, not warn."""
    script = ("import warnings; warnings.simplefilter('error')\n"
              "import layerfuse.hf.modeling\n"
              "from transformers.models.auto.configuration_auto import CONFIG_MAPPING\n"
              "from transformers.models.auto.modeling_auto import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING as M\n"
              "assert 'layerfuse-tagger' in CONFIG_MAPPING\n"
              "assert M[CONFIG_MAPPING['layerfuse-tagger']].__name__ == 'LayerfuseForTokenClassification'\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


def test_an_exported_model_loads_after_a_mere_lookup_of_the_auto_module(request, tmp_path_factory, exported):
    """A host that only looked transformers' auto module up (``importlib.util.find_spec``, as availability
    checks do) before importing it used up the one-shot registration hook: the exported model no longer
    loaded ("unrecognized configuration class")."""
    _, folder = _exported(("word", "concat"), request, tmp_path_factory, exported)
    script = ("import importlib.util, sys\n"
              "import layerfuse\n"
              "importlib.util.find_spec('transformers.models.auto.modeling_auto')\n"
              "from transformers import AutoModelForTokenClassification\n"
              "print(type(AutoModelForTokenClassification.from_pretrained(sys.argv[1])).__name__)\n")
    out = subprocess.run([sys.executable, "-c", script, folder], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "LayerfuseForTokenClassification", out.stderr[-2000:]


@pytest.fixture(scope="module")
def roberta_cache(tiny_roberta_dir, tiny_conll_dir, tmp_path_factory):
    config = ExtractConfig(model=str(tiny_roberta_dir), dataset=str(tiny_conll_dir),
                           cache_dir=str(tmp_path_factory.mktemp("cache")), unit_rows=256, splits=("train", "dev"))
    return extract(config, progress=False, log=lambda m: None).path


def test_a_byte_level_bpe_backbone_finds_its_words_in_the_vocabulary(roberta_cache, tmp_path):
    """RoBERTa's words begin with Ġ: the vocabulary table finds the same words as the tokenizer's word_ids,
    and text with no punctuation glued to a word (where raw text and predict's words agree) is tagged alike."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

    run = _head(roberta_cache, "concat", tmp_path)
    folder = export_head(run, str(tmp_path / "exported"))
    predictor = Predictor(run.removesuffix(".json") + ".head", device="cpu")
    texts = ["Alice met Bobson in Paris today", "Carolson of Globex said Rome is big"]
    words = [t.split() for t in texts]
    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    enc = AutoTokenizer.from_pretrained(folder)(words, is_split_into_words=True, return_tensors="pt", padding=True)
    word_ids = torch.tensor([[-1 if w is None else w for w in enc.word_ids(b)] for b in range(len(words))])
    with torch.inference_mode():
        torch.testing.assert_close(model(**enc).logits, model(**enc, word_ids=word_ids).logits)
    ner = pipeline("token-classification", model=folder, aggregation_strategy="simple", device="cpu")
    found = 0
    for text, tags in zip(texts, predictor.tag(words)):
        expected = [(e["type"], *e["chars"]) for e in entities(tags, split_words(text), text)]
        assert [(e["entity_group"], e["start"], e["end"]) for e in ner(text)] == expected
        found += len(expected)
    assert found, "the head tags nothing: a weak comparison"
