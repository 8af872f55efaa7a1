"""Heads over a subword cache with the special tokens' rows (`extract --special-tokens`): those rows
are in every sequence a head sees, but no loss is taken and no tag is read there, so words, tags,
layer scores and the F1 of a head that reads rows one by one are those of the cache without them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from layerfuse.cache.reader import open_entry
from layerfuse.errors import LayerfuseError
from layerfuse.extract.run import ExtractConfig, extract
from layerfuse.layers.scores import score_layers
from layerfuse.training import TrainConfig, train_head
from layerfuse.training.data import IGNORE, load_data
from layerfuse.training.evaluation import score

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def entries(tmp_path_factory, tiny_bert_dir, tiny_conll_dir):
    """{"word", "subword", "special"}: the three entries of the tiny BERT over the tiny data."""
    root = tmp_path_factory.mktemp("special-cache")
    options = {"word": {}, "subword": {"granularity": "subword"},
               "special": {"granularity": "subword", "special_tokens": True}}
    return {name: open_entry(extract(ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir),
                                                   cache_dir=str(root), **kw), progress=False, log=lambda m: None).path)
            for name, kw in options.items()}


@pytest.fixture(scope="module")
def data(entries):
    return {name: load_data(entry) for name, entry in entries.items()}


def test_special_rows_are_seen_but_never_scored(entries, data):
    for split in ("train", "dev", "test"):
        special, word = getattr(data["special"], split), getattr(data["word"], split)
        wi = entries["special"].split(split).group["word_index"][:]
        assert np.all(special.labels[wi == -1] == IGNORE)
        assert np.all(special.labels[special.offsets[:-1]] == IGNORE)  # a sentence's first row is [CLS]
        assert np.all(special.labels[special.offsets[1:] - 1] == IGNORE)  # its last, [SEP]
        assert special.n_words == word.n_words  # one scored row per word, as on the word cache
        assert np.array_equal(special.labels[special.labels != IGNORE], word.labels)
        assert np.array_equal(special.lengths, getattr(data["subword"], split).lengths + 2)


def test_extra_layers_train_and_evaluate_over_the_whole_input(data):
    config = TrainConfig(fusion="extra", shots=8, epochs=2, seed=0, lr=1e-2)
    result = train_head(config, data["special"])
    word = train_head(config, data["word"])
    assert result.n_train_words == word.n_train_words and result.n_train_sentences == word.n_train_sentences
    assert all(math.isfinite(e["dev_f1"]) and math.isfinite(e["dev_loss"]) for e in result.evals)
    assert 0.0 <= result.best_dev_f1 <= 1.0 and result.test_f1_at_best is not None


def test_a_row_wise_head_scores_the_same_with_or_without_special_rows(data, entries, monkeypatch):
    result = train_head(TrainConfig(fusion="concat", shots=None, epochs=15, seed=0, lr=1e-2), data["subword"])
    labels = data["subword"].label_names
    kwargs = dict(device=torch.device("cpu"), label_names=labels, batch_size=16)
    f1_plain, loss_plain = score(result.tagger, data["subword"].dev, **kwargs)
    f1_special, loss_special = score(result.tagger, data["special"].dev, **kwargs)
    assert f1_special == pytest.approx(f1_plain, abs=1e-12) and f1_plain > 0
    assert loss_special == pytest.approx(loss_plain, rel=1e-5)
    # Streamed from the cache block by block (a split over the memory budget): the same rows, the same F1.
    from layerfuse.training import budget
    from layerfuse.training.store import open_split

    monkeypatch.setattr(budget, "MEMORY_BUDGET_BYTES", 0)
    streamed = open_split(entries["special"].split("dev"), sentences=None, layers=data["special"].dev.layers)
    assert streamed.streamed and np.array_equal(streamed.labels, data["special"].dev.labels)
    assert score(result.tagger, streamed, **kwargs)[0] == pytest.approx(f1_special, abs=1e-12)


def test_rank_layers_ignores_the_special_rows(entries):
    plain = score_layers(entries["subword"].split("dev"), seed=0)
    special = score_layers(entries["special"].split("dev"), seed=0)
    assert [layer for layer, _ in special] == [layer for layer, _ in plain]
    np.testing.assert_allclose([nu for _, nu in special], [nu for _, nu in plain], rtol=1e-5)


def test_live_backbone_is_refused_in_one_line(entries, tmp_path):
    from layerfuse.cli.train import main
    from layerfuse.finetune.live import load_live_backbone
    from layerfuse.inference.predictor import Predictor

    with pytest.raises(LayerfuseError, match="special-token rows"):
        load_live_backbone(entries["special"].meta, device=torch.device("cpu"))
    result = CliRunner().invoke(main, ["--cache", entries["special"].path, "--fusion", "concat", "--shots", "2",
                                       "--epochs", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    head = tmp_path / "concat-n2-e1-s0.head.json"
    assert json.loads(head.read_text())["cache"]["special_tokens"] is True
    with pytest.raises(LayerfuseError, match="special-token rows"):
        Predictor(str(head))
