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
