"""A probing run on the tiny cache: one record per probe, a rerun trains nothing, a killed run trains
only what it had left; control labels agree across splits; N-shot samples are train-head's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from layerfuse.cache.reader import open_entry
from layerfuse.errors import LayerfuseError
from layerfuse.probing import run as run_module
from layerfuse.probing.data import label_view, scored_tokens
from layerfuse.probing.probe import ProbeConfig
from layerfuse.probing.records import FILENAME, read_records, record_key
from layerfuse.probing.report import summarize
from layerfuse.probing.run import MIX, run_probes

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = ProbeConfig(epochs=1, min_steps=20)


@pytest.fixture
def entry(tiny_cache):
    return open_entry(tiny_cache)


@pytest.fixture
def count_training(monkeypatch):
    """How many probes the run trains (train_probe calls)."""
    calls = []
    original = run_module.train_probe

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(run_module, "train_probe", counting)
    return calls


def _lines(path):
    return [line for line in path.read_text().split("\n") if line]


def test_one_record_per_probe_and_a_rerun_adds_none(entry, tmp_path, count_training):
    records = run_probes(entry, out=str(tmp_path), label_set_names=["ner"], seeds=[0, 1], config=TINY)
    n = 2 * (entry.num_layers + 2) * 2  # seeds x (layers 0..L + mix) x (task, control)
    assert len(records) == n == len(count_training) == len(_lines(tmp_path / FILENAME))
    assert len({record_key(r) for r in records}) == n
    layer = next(r for r in records if r["probe"] == 1 and not r["control"])
    assert set(layer["scores"]) == {"dev", "test"} and set(layer["scores"]["dev"]) == {"acc", "f1"}
    assert layer["nu"] is not None and layer["cache"]["key"] and layer["config"] == TINY.record()
    control = next(r for r in records if r["probe"] == 1 and r["control"])
    assert set(control["scores"]["dev"]) == {"acc"} and "nu" not in control
    mix = next(r for r in records if r["probe"] == MIX and not r["control"])
    assert len(mix["mix_weights"]) == entry.num_layers + 1
    assert mix["center_of_gravity"] == pytest.approx(sum(i * w for i, w in enumerate(mix["mix_weights"])))

    before = (tmp_path / FILENAME).read_text()
    again = run_probes(entry, out=str(tmp_path), label_set_names=["ner"], seeds=[0, 1], config=TINY)
    assert len(count_training) == n  # nothing trained
    assert (tmp_path / FILENAME).read_text() == before
    assert again == records


def test_a_killed_run_trains_only_what_is_left(entry, tmp_path, count_training):
    full = tmp_path / "full"
    run_probes(entry, out=str(full), label_set_names=["ner"], seeds=[0], config=TINY)
    lines = _lines(full / FILENAME)
    k = 3
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    # k whole records, then one the kill cut short
    (resumed / FILENAME).write_text("\n".join(lines[:k]) + "\n" + lines[k][:40])
    count_training.clear()
    records = run_probes(entry, out=str(resumed), label_set_names=["ner"], seeds=[0], config=TINY)
    assert len(count_training) == len(lines) - k
    assert len(read_records(str(resumed / FILENAME))) == len(lines) == len(records)
    assert [json.loads(x) for x in lines[:k]] == records[:k]  # the old records are kept, not retrained


def test_another_config_is_another_record(entry, tmp_path, count_training):
    run_probes(entry, out=str(tmp_path), label_set_names=["ner"], seeds=[0], config=TINY, control=False)
    n = len(count_training)
    run_probes(entry, out=str(tmp_path), label_set_names=["ner"], seeds=[0], config=ProbeConfig(epochs=1, min_steps=21),
               control=False)
    assert len(count_training) == 2 * n
    assert len(read_records(str(tmp_path / FILENAME))) == 2 * n


def test_control_labels_agree_across_splits(entry):
    view = label_view(entry, "ner")
    control = run_module._SetRun(entry, name="ner", info={"kind": "span", "names": view.label_names}, shots=None,
                                 seed=0, config=TINY)
    seen = {}
    for tokens in (control.train, *control.evals.values()):
        for word, label in zip(tokens.words, control.labels(tokens, True)):
            assert seen.setdefault(word, label) == label, word
    assert len(seen) > 20 and len(set(seen.values())) > 1


def test_shots_sample_is_train_heads(entry, tmp_path):
    from layerfuse.training.sampling import entity_types, few_shot_sample

    view = label_view(entry, "ner")
    run = run_module._SetRun(entry, name="ner", info={"kind": "span", "names": view.label_names}, shots=2, seed=4,
                             config=TINY)
    sentences = few_shot_sample(view.split("train").n_sentences, shots=2, n_types=len(entity_types(view.meta)), seed=4)
    expected = scored_tokens(view.split("train"), sentences=sentences)
    assert np.array_equal(run.train.labels, expected.labels) and len(run.train) < 200
    capped = run_module._SetRun(entry, name="ner", info={"kind": "span", "names": view.label_names}, shots=None,
                                seed=0, config=ProbeConfig(max_train_tokens=50))
    assert len(capped.train) == 50


def test_report_means_over_seeds(entry, tmp_path):
    records = run_probes(entry, out=str(tmp_path), label_set_names=["ner"], seeds=[0, 1], config=TINY)
    (task,) = summarize(records)
    for layer in range(entry.num_layers + 1):
        accs = [r["scores"]["dev"]["acc"] for r in records if r["probe"] == layer and not r["control"]]
        controls = [r["scores"]["dev"]["acc"] for r in records if r["probe"] == layer and r["control"]]
        assert task.acc[layer] == pytest.approx(np.mean(accs))
        assert task.selectivity[layer] == pytest.approx(np.mean(accs) - np.mean(controls))
    assert task.metric == "f1" and task.split == "dev" and task.seeds == [0, 1]


def test_unknown_label_set_is_one_line_error(entry, tmp_path):
    with pytest.raises(LayerfuseError, match="'nope'"):
        run_probes(entry, out=str(tmp_path), label_set_names=["nope"], config=TINY)
