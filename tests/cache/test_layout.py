"""Entry folder names: readable, filesystem-safe, never hidden."""

from __future__ import annotations

import pytest

from layerfuse.cache.layout import entry_path, slug


@pytest.mark.parametrize("name, expected", [
    ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2"),
    (".gpu/minilm-fp16", "gpu-minilm-fp16"),  # a model in a hidden folder
    ("./models/x", "models-x"),
    ("../.hidden", "hidden"),
    ("/data/conll 2003/", "data-conll-2003"),
    ("...", "x"),
])
def test_a_slug_is_safe_and_never_hidden(name, expected):
    assert slug(name) == expected


def test_an_entry_made_from_a_hidden_folder_is_not_hidden(tmp_path):
    path = entry_path(str(tmp_path), model_name=".gpu/minilm-fp16", dataset_name="conll2003", key="0123")
    assert not path.rsplit("/", 1)[-1].startswith(".")


def test_splits_are_listed_train_dev_test_whatever_order_the_store_lists_them():
    """`info` showed test, train, dev from one disk and dev, test, train over HTTP: the store's order."""
    from types import SimpleNamespace

    from layerfuse.cache.layout import subgroups

    store = SimpleNamespace(groups=lambda: iter([("test", 1), ("lm", 2), ("dev", 3), ("extra", 4), ("train", 5)]))
    assert [name for name, _ in subgroups(store)] == ["train", "dev", "test", "extra", "lm"]
