"""The task registry: one object per task, found from a name, a cache entry's or checkpoint's
metadata, a record's config or a config object; names stay what is persisted."""

import subprocess
import sys

import pytest

from layerfuse.errors import LayerfuseError
from layerfuse.tasks import DEFAULT_TASK, MLM, NER, TASKS, Task, task_of


def test_names_are_the_persisted_values():
    assert list(TASKS) == ["ner", "mlm"] and DEFAULT_TASK == "ner"
    assert all(isinstance(t, Task) and TASKS[t.name] is t for t in TASKS.values())


@pytest.mark.parametrize("source, expected", [
    ("mlm", MLM), ("ner", NER), (None, NER), ({}, NER),  # entries and records from before tasks existed
    ({"task": "mlm", "key": "abc"}, MLM), ({"config": {}}, NER), (MLM, MLM),
])
def test_task_of_names_mappings_and_objects(source, expected):
    assert task_of(source) is expected


def test_task_of_a_config():
    from layerfuse.extract.run import ExtractConfig
    from layerfuse.training.config import TrainConfig

    assert task_of(TrainConfig(fusion="concat", shots=1, epochs=1, seed=0, task="mlm", layers="1")) is MLM
    assert task_of(ExtractConfig()) is NER and ExtractConfig(task="mlm").task_info is MLM


def test_unknown_task_is_named_with_the_choices():
    with pytest.raises(LayerfuseError, match="'pos'.*ner, mlm"):
        task_of("pos")


def test_what_the_library_asks():
    assert (NER.labels_from_data, NER.masks_inputs, NER.granularity, NER.headline) == (True, False, None, "f1")
    assert (MLM.labels_from_data, MLM.masks_inputs, MLM.granularity, MLM.headline) == (False, True, "subword", "ppl")
    assert (NER.flag, MLM.flag) == ("", " --task mlm")
    assert (NER.checkpoint_version, MLM.checkpoint_version) == (2, 3)  # pinned: older readers rely on them


def test_heads_and_training_behaviour_are_found_by_the_task():
    from layerfuse.fusions import FusedMaskedLM, TokenTagger
    from layerfuse.training import tasks as training

    assert training.head_class(NER) is TokenTagger and training.head_class(MLM) is FusedMaskedLM
    assert isinstance(training.training_of(NER), training.NER) and isinstance(training.training_of("mlm"), training.MLM)
    assert set(training.TRAINING) == set(TASKS.values())  # one entry per task, keyed by the task itself


def test_extract_config_asks_the_task():
    from layerfuse.extract.run import ExtractConfig

    mlm = ExtractConfig(task="mlm", granularity="word")
    assert mlm.granularity == "subword" and mlm.dataset == MLM.default_dataset
    assert ExtractConfig().dataset == NER.default_dataset
    with pytest.raises(LayerfuseError, match="need --task mlm"):
        ExtractConfig(block_size=64)


def test_the_registry_imports_no_torch():
    code = "import sys, layerfuse.tasks; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
