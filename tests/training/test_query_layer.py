"""``--query-layer``: z_L from the last fused layer (fused, the default) or from the backbone's top
layer (top), read even when it is not fused. Where the fused layers end at the top layer both are
the same run; otherwise top reads the top layer's cached values as z_L, DWAtt as one slice after the
fused layers (not fused); a checkpoint rebuilds the head with it, and a pack trains it as its solo runs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from layerfuse.cache.reader import open_entry
from layerfuse.fusions import DWAtt, FusionConfig
from layerfuse.fusions.stacked import stacked
from layerfuse.training import TrainConfig, load_data, train_head
from layerfuse.training.checkpoint import load_checkpoint, save_checkpoint
from layerfuse.training.data import load_for_run
from layerfuse.training.evaluation import predict_tags
from layerfuse.training.loop import prepare_run
from layerfuse.training.packed import train_pack

pytestmark = pytest.mark.usefixtures("one_thread")

RUN = TrainConfig(fusion="dwatt", shots=4, epochs=2, seed=0, batch_size=4, device="cpu", dropout=0.0)
TOP = 2  # the tiny BERT's top layer


def _numbers(result) -> dict:
    return {"best_dev_f1": result.best_dev_f1, "test_f1_at_best": result.test_f1_at_best, "evals": result.evals}


@pytest.fixture(scope="module")
def entry(tiny_cache):
    return open_entry(tiny_cache)


@pytest.fixture(scope="module")
def data(entry):
    return load_data(entry)


@pytest.mark.parametrize("fusion", ["dwatt", "base", "extra", "concat"])
def test_layers_ending_at_the_top_layer_give_the_same_run(data, fusion):
    fused = train_head(replace(RUN, fusion=fusion, layers="1..2"), data)
    top = train_head(replace(RUN, fusion=fusion, layers="1..2", query_layer="top"), data)
    assert _numbers(top) == _numbers(fused)
    assert top.layers == fused.layers


def test_top_reads_the_top_layer_apart_from_the_fused_ones(entry, data):
    # What a run of its own reads (auto:K on this 2-layer entry picks the top layer: a fixed layer below it).
    config = replace(RUN, layers="1", query_layer="top")
    run = prepare_run(config, load_for_run(entry, layers=config.layers, shots=config.shots, seed=config.seed,
                                            query_layers=config.query_layers(entry.num_layers)))
    fused = run.layers[:-1]
    assert fused == (1,) and run.layers[-1] == TOP
    head = run.model[0]
    assert head.n_layers == len(fused) and head.fusion.query_slices == 1
    top_values = data.dev.take_layers((TOP,)).hidden[:, 0]
    np.testing.assert_array_equal(run.dev.hidden[:, -1], top_values)  # the z_L slice: the top layer as cached
    np.testing.assert_array_equal(run.dev.hidden[:, :-1], data.dev.take_layers(fused).hidden)
    base = prepare_run(replace(config, fusion="base"), data)
    assert base.layers == (TOP,)  # Base reads z_L alone
    mix = prepare_run(replace(config, fusion="concat"), data)
    assert TOP not in mix.layers  # no z_L: the fused layers only


def test_dwatt_takes_z_l_as_a_slice_it_does_not_fuse():
    shape = dict(n_layers=2, dim=8, num_heads=2, ffn_dim=16)
    torch.manual_seed(0)
    fused = DWAtt(**FusionConfig(**shape).arguments_for(DWAtt)).double()
    top = DWAtt(**FusionConfig(**shape, query_layer="top").arguments_for(DWAtt)).double()
    top.load_state_dict(fused.state_dict())
    hidden = torch.randn(2, 3, 3, 8, dtype=torch.float64)  # 2 fused layers, then z_L
    mask = torch.ones(2, 3, dtype=torch.bool)
    same_z = torch.cat([hidden[:, :, :2], hidden[:, :, 1:2]], dim=2)  # z_L = the last fused layer
    torch.testing.assert_close(top(same_z, mask), fused(same_z[:, :, :2], mask))
    changed = hidden.clone()
    changed[:, :, 2] += 1.0
    assert not torch.allclose(top(changed, mask), top(hidden, mask))  # the slice is z_L
    params, buffers = torch.func.stack_module_state([top, top])
    packed = stacked(top, params, buffers, hidden.reshape(1, 1, 6, 3, 8).expand(2, -1, -1, -1, -1),
                     mask.reshape(1, 1, 6).expand(2, -1, -1), k=2)
    torch.testing.assert_close(packed[0, 0], top(hidden, mask).reshape(6, 8))


def test_a_pack_of_top_heads_trains_as_its_solo_runs(data):
    config = replace(RUN, layers="1", query_layer="top")
    alone = train_head(config, data)
    packed = train_pack([config, replace(config, seed=1)], data)
    assert packed[0].layers == alone.layers == [1, TOP]
    assert packed[0].best_dev_f1 == pytest.approx(alone.best_dev_f1, abs=1e-4)


def test_a_checkpoint_rebuilds_the_head_with_its_query_layer(entry, data, tmp_path):
    result = train_head(replace(RUN, layers="1", query_layer="top"), data)
    assert result.tagger_kwargs["query_layer"] == "top" and result.layers == [1, TOP]
    assert result.layer_usage["layers"] == [1]  # the fused layers: z_L is not one of them
    stem = str(tmp_path / "head")
    save_checkpoint(stem, result.tagger, tagger_kwargs=result.tagger_kwargs, layers=result.layers,
                    label_names=data.label_names, cache_meta=data.meta, cache_path=data.path,
                    config=replace(RUN, layers="1", query_layer="top"))
    tagger, meta = load_checkpoint(stem + ".safetensors", entry=entry)
    assert meta["layers"] == [1, TOP] and tagger.fusion.query_slices == 1
    dev = load_data(entry, layers=meta["layers"]).dev
    before = predict_tags(result.tagger, dev, device="cpu")
    after = predict_tags(tagger, dev, device="cpu")
    assert all(np.array_equal(a, b) for a, b in zip(before, after))


@pytest.mark.parametrize("fusion", ["concat", "scalarmix"])
def test_a_fusion_without_z_l_runs_top_as_the_same_run_as_fused(fusion):
    """Concat and ScalarMix read no z_L: with --query-layer top they are the fused run (its record
    says fused, its id is that run's), never a second trial of one seed in the report."""
    from layerfuse.experiments.results import run_id

    top = TrainConfig(fusion=fusion, shots=4, epochs=2, seed=0, query_layer="top")
    assert top.query_layer == "fused" and top == replace(top, query_layer="fused")
    old_record = {**top.record(), "query_layer": "top"}  # written before it said so
    assert run_id(old_record) == run_id(top)
    assert TrainConfig(fusion="dwatt", shots=4, epochs=2, seed=0, query_layer="top").query_layer == "top"
