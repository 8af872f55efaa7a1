"""The Python API refuses what it cannot read right in one line: ids of the wrong type read other
layers or sentences ("26": layers 2 and 6; 0.9: sentence 0), a path into a split opened an array as a
split and then made the entry look removed, an integer dtype truncated the hidden states."""

from __future__ import annotations

import numpy as np
import pytest

from layerfuse.cache.reader import open_entry
from layerfuse.errors import LayerfuseError
from layerfuse.layers import parse_layers
from layerfuse.training.data import load_data, load_for_run


@pytest.mark.parametrize("layers", ["12", [1.7], [True, False]])
def test_load_data_refuses_ids_that_are_not_integers(tiny_cache, layers):
    with pytest.raises(LayerfuseError, match="layers must be"):
        load_data(open_entry(tiny_cache), layers=layers)


def test_load_data_refuses_train_sentences_it_does_not_have(tiny_cache):
    entry = open_entry(tiny_cache)
    with pytest.raises(LayerfuseError, match="train_sentences must be integer ids"):
        load_data(entry, train_sentences=[0.9, 3.2])
    n = entry.split("train").n_sentences
    with pytest.raises(LayerfuseError, match=rf"train_sentences \[{n}\] out of range: .* sentences 0..{n - 1}"):
        load_data(entry, train_sentences=[0, n])
    assert load_data(entry, layers=[1, 2], train_sentences=[0, 3]).train.layers == (1, 2)


def test_a_path_is_refused_where_an_opened_entry_is_needed(tiny_cache):
    with pytest.raises(LayerfuseError, match=r"load_data takes an opened entry \(layerfuse.open_entry\(PATH\)\)"):
        load_data(tiny_cache)
    with pytest.raises(LayerfuseError, match="load_for_run takes an opened entry"):
        load_for_run(tiny_cache, layers=None, shots=2, seed=0)
    with pytest.raises(LayerfuseError, match="seed 'a' is not an integer"):
        load_for_run(open_entry(tiny_cache), layers=None, shots=2, seed="a")
    assert load_for_run(open_entry(tiny_cache), layers=[1, 2], shots=2, seed=0).dev.layers == (1, 2)
    from layerfuse.experiments import run_sweep
    from layerfuse.training import TrainConfig

    config = TrainConfig(fusion="base", shots=2, epochs=1, seed=0)
    with pytest.raises(LayerfuseError, match="run_grid takes an opened entry"):  # was AttributeError of a str
        run_sweep(tiny_cache, [config], out="unused")
    with pytest.raises(LayerfuseError, match="configs must be a list of TrainConfig"):
        run_sweep(open_entry(tiny_cache), config, out="unused")


def test_extract_config_numbers_are_numbers(tmp_path):
    """numpy integers failed as JSON deep inside extract; unit_rows=10.5 in zarr; trust_remote_code="no" was true."""
    from layerfuse.extract.run import ExtractConfig

    config = ExtractConfig(dataset=str(tmp_path), max_length=np.int64(64), unit_rows=np.int32(256))
    assert (type(config.max_length), type(config.unit_rows)) == (int, int)
    for name, value in (("unit_rows", 10.5), ("token_budget", 2048.5), ("trust_remote_code", "no"),
                        ("max_length", True)):
        with pytest.raises(LayerfuseError, match=rf"ExtractConfig.{name} must be"):
            ExtractConfig(dataset=str(tmp_path), **{name: value})


@pytest.mark.parametrize("name", ["train/", "", "/", "train/hidden", "./train", None, 0])
def test_only_a_split_s_own_name_opens_it(tiny_cache, name):
    entry = open_entry(tiny_cache)
    with pytest.raises(LayerfuseError, match=r"is not in .*; it has \['train', 'dev', 'test'\]"):
        entry.split(name)
    assert entry.splits == ["train", "dev", "test"]  # still readable: nothing was opened as a split


@pytest.mark.parametrize("path, message", [(None, "takes a cache entry's path or URL"),
                                           (123, "takes a cache entry's path or URL")])
def test_open_entry_refuses_what_is_not_a_path(path, message):
    with pytest.raises(LayerfuseError, match=message):
        open_entry(path)


def test_open_entry_of_an_array_s_folder_says_so(tiny_cache):
    with pytest.raises(LayerfuseError, match="no cache entry at .*train/hidden: it is an array of one"):
        open_entry(f"{tiny_cache}/train/hidden")


def test_hidden_reads_floats_only(tiny_cache):
    train = open_entry(tiny_cache).split("train")
    with pytest.raises(LayerfuseError, match=r"come from `stored\(\)`"):
        train.hidden(sentences=[0], layers=[1], dtype=np.int8)
    with pytest.raises(LayerfuseError, match="not a numpy dtype"):
        train.hidden(sentences=[0], layers=[1], dtype="bogus")
    assert train.hidden(sentences=[0], layers=[1], dtype=np.float32).dtype == np.float32
    with pytest.raises(LayerfuseError, match="never negative"):
        train.nbytes(rows=-1, layers=2)


def test_layer_ids_from_python_parse_as_their_spec():
    assert parse_layers([2, 1], num_layers=4) == parse_layers("1,2", num_layers=4)


def test_extract_config_takes_one_name_as_that_name(tmp_path):
    """splits="train" was read letter by letter ("no split 'a', 'i', 'n', 'r', 't'"), splits=() as every
    split, model=3 failed in pathlib."""
    from layerfuse.extract.run import ExtractConfig

    config = ExtractConfig(splits="train", labels="pos", dataset=tmp_path)
    assert config.splits == ("train",) and config.labels == ("pos",) and config.dataset == str(tmp_path)
    assert ExtractConfig(splits=["train", "dev"]).splits == ("train", "dev")
    with pytest.raises(LayerfuseError, match="ExtractConfig.splits is empty"):
        ExtractConfig(splits=())
    with pytest.raises(LayerfuseError, match="ExtractConfig.model takes a name or a path, got 3"):
        ExtractConfig(model=3)


def test_api_objects_say_what_they_are(tiny_cache):
    """HeadData's repr printed every array (350 lines in a notebook cell); an entry's was an address."""
    entry = open_entry(tiny_cache)
    data = load_data(entry)
    assert repr(entry) == f"CacheEntry({tiny_cache!r})"
    assert repr(entry.split("dev")).startswith(f"CacheSplit({tiny_cache!r}, 'dev': ")
    assert repr(data).startswith("HeadData(") and repr(data).count("\n") == 0 and "train: " in repr(data)


def test_train_head_refuses_an_entry_for_its_data(tiny_cache):
    from layerfuse.training import TrainConfig, train_head

    with pytest.raises(LayerfuseError, match="train_head takes the data load_for_run or load_data returns"):
        train_head(TrainConfig(fusion="base", shots=2, epochs=1, seed=0), open_entry(tiny_cache))


def test_an_empty_list_of_layers_names_none():
    with pytest.raises(LayerfuseError, match="no layers named"):  # it read as "" (all)
        parse_layers([], num_layers=4)
