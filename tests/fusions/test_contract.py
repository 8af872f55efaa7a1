"""Every fusion declares what it can do (`layerfuse.fusions.fusion`), and the library reads only
those declarations: each entry of `FUSIONS` keeps the contract, and a fusion defined here, in the
test alone, with a setting of its own, trains, trains in a pack, sweeps, is reported, saves and
loads its head and exports as a transformers model with no other file changed."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from torch import nn

from layerfuse.cache.reader import open_entry
from layerfuse.cli.options import fusion_settings
from layerfuse.errors import LayerfuseError
from layerfuse.experiments import load_cached, run_sweep
from layerfuse.experiments.report import label, table, usage_by_label
from layerfuse.experiments.results import run_id
from layerfuse.experiments.runner import grid
from layerfuse.fusions import FUSIONS, Fusion, FusionConfig, Option, TokenTagger
from layerfuse.fusions.fusion import normalised
from layerfuse.fusions.stacked import cast, stacked
from layerfuse.training import TrainConfig
from layerfuse.training.checkpoint import load_checkpoint, save_checkpoint
from layerfuse.training.diagnostics import describe
from layerfuse.training.loop import train_head
from layerfuse.training.packed import can_pack, train_pack

pytestmark = pytest.mark.usefixtures("one_thread")

L, D, K = 3, 8, 2
SHAPE = dict(n_layers=L, dim=D, num_heads=2, ffn_dim=16, extra_layers=1, dropout=0.0)
DECLARED = ("token_wise", "top_layer_only", "reads_query_layer", "shares_evaluation_batch")


GAIN = Option("toy_gain", 1.0, type=float, minimum=0.0, help="The toy's output gain.")


class Toy(Fusion):
    """``h = g sum_n w_n z_n`` with free weights ``w`` (not a softmax) and a gain ``g``, a setting of
    its own: a fusion unknown to the library."""

    token_wise = True
    shares_evaluation_batch = True
    options = (GAIN,)

    def __init__(self, *, n_layers: int, toy_gain: float) -> None:
        super().__init__()
        self.gain = toy_gain
        self.w = nn.Parameter(torch.full((n_layers,), 1.0 / n_layers))

    def forward(self, hidden, mask):
        return self.gain * torch.einsum("btld,l->btd", hidden, self.w.to(hidden.dtype))

    @staticmethod
    def stacked_forward(fusion, params, buffers, rows, mask, *, k, shared, lengths):
        w = cast(params, rows.dtype)["w"]  # [K, L]
        return fusion.gain * torch.einsum("nld,kl->knd" if shared else "knld,kl->knd", rows, w)

    def layer_usage(self, batches, *, autocast):
        weight = self.w.detach().abs().tolist()
        return {"weight": weight, "share": normalised(weight)}


def _fusion(name: str, cls) -> nn.Module:
    torch.manual_seed(0)
    return cls(**FusionConfig(**SHAPE).arguments_for(cls)).double()


def _batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, 5, L, D, generator=gen, dtype=torch.float64)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 3:] = False
    return hidden, mask


@pytest.mark.parametrize("name", sorted(FUSIONS))
def test_every_fusion_keeps_the_contract(name):
    cls = FUSIONS[name]
    assert issubclass(cls, Fusion)
    for flag in DECLARED:
        assert isinstance(getattr(cls, flag), bool), f"{name}.{flag}"
    assert not cls.top_layer_only or cls.reads_query_layer  # reading z_L alone is reading z_L
    assert cls.forward_packed is None or callable(cls.forward_packed)
    assert cls.stacked_forward is None or callable(cls.stacked_forward)
    assert not cls.shares_evaluation_batch or cls.packs()  # only a stacked forward can share a batch

    fusion = _fusion(name, cls).eval()
    hidden, mask = _batch()
    with torch.no_grad():
        out = fusion(hidden, mask)
        assert out.shape == (2, 5, D)
        if cls.packs():
            heads = [fusion, _fusion(name, cls).eval()]
            params, buffers = torch.func.stack_module_state(heads)
            rows = hidden[mask][None, None].expand(K, -1, -1, -1, -1)  # [K, 1, R, L, d], one sentence each
            lengths = [torch.tensor([int(mask[0].sum()), int(mask[1].sum())])] * K
            packed = stacked(fusion, params, buffers, rows, mask[mask][None, None].expand(K, -1, -1), k=K,
                             lengths=lengths)
            torch.testing.assert_close(packed[0, 0], out[mask])
    usage = fusion.layer_usage([(hidden, mask)], autocast=torch.autocast("cpu", enabled=False))
    if usage is not None:
        assert list(usage)[-1] == "share" and len(usage["share"]) == L
        assert min(usage["share"]) >= 0 and math.isclose(sum(usage["share"]), 1.0, rel_tol=1e-6)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(FUSIONS, "toy", Toy)
    return "toy"


def test_a_new_fusion_trains_packs_and_is_reported(toy, tiny_cache, tmp_path):
    entry = open_entry(tiny_cache)
    config = TrainConfig(fusion=toy, shots=4, epochs=2, seed=0, batch_size=4, device="cpu", dropout=0.0,
                         toy_gain=0.5)
    configs = [config, replace(config, seed=1)]
    data = load_cached(entry, configs)

    alone = train_head(config, data)
    assert isinstance(alone.tagger, TokenTagger) and isinstance(alone.tagger.fusion, Toy)
    assert alone.tagger.fusion.gain == 0.5 and alone.config["toy_gain"] == 0.5
    assert alone.layer_usage["layers"] == [1, 2] and describe(alone.layer_usage).startswith("layers used (share)")

    assert can_pack(config)
    packed = train_pack(configs, data)
    assert [r.seconds["pack"] for r in packed] == [K, K]
    assert packed[0].best_dev_f1 == pytest.approx(alone.best_dev_f1, abs=1e-4)  # dropout off: its solo run

    records = run_sweep(entry, configs, out=str(tmp_path / "sweep"), workers=0, pack=K, progress=False,
                        log=lambda m: None)
    rows = [line for line in table(records.values()).splitlines() if line.startswith("| toy (toy gain 0.5) |")]
    assert len(rows) == 1 and rows[0].endswith("(2) |")
    layers, share = usage_by_label(records.values())["toy (toy gain 0.5)"]
    assert layers == [1, 2] and share.sum() == pytest.approx(1.0)


def test_a_new_fusions_setting_is_a_run_setting(toy):
    config = TrainConfig(fusion=toy, shots=4, epochs=2, seed=0, toy_gain=0.5)
    assert config.toy_gain == 0.5 and config.record()["toy_gain"] == 0.5
    assert replace(config, toy_gain=GAIN.default) == TrainConfig(fusion=toy, shots=4, epochs=2, seed=0)
    with pytest.raises(LayerfuseError, match="toy_gain must be >= 0"):
        TrainConfig(fusion=toy, shots=4, epochs=2, seed=0, toy_gain=-1.0)

    # it names its fusion's runs alone, and a record without it (written before it existed) ran the default
    assert run_id(config) != run_id(replace(config, toy_gain=GAIN.default))
    assert run_id(replace(config, toy_gain=GAIN.default)) == run_id({**config.record(), "toy_gain": GAIN.default})
    before = {k: v for k, v in replace(config, toy_gain=GAIN.default).record().items() if k != "toy_gain"}
    assert run_id(before) == run_id(replace(config, toy_gain=GAIN.default))
    concat = TrainConfig(fusion="concat", shots=4, epochs=2, seed=0)
    assert run_id(replace(concat, toy_gain=0.5)) == run_id(concat)

    configs = grid(fusions=[toy, "concat"], shots=[4], epochs=[2], trials=1, base=concat, toy_gain=[0.5, 2.0])
    assert sorted((c.fusion, c.toy_gain) for c in configs) == [("concat", 1.0), (toy, 0.5), (toy, 2.0)]
    assert label(config.record()) == "toy (toy gain 0.5)" and label(concat.record()) == "concat"
    assert fusion_settings({"fusion_opt": ("toy_gain=0.5",)}) == {"toy_gain": 0.5}  # the command line's
    assert fusion_settings({"fusion_opt": ("toy-gain=0.5,2",)}, grid=True) == {"toy_gain": [0.5, 2.0]}


def test_a_new_fusions_head_saves_loads_and_exports(toy, tiny_cache, tmp_path):
    from transformers import AutoModelForTokenClassification

    from layerfuse.hf.export import export_head

    entry = open_entry(tiny_cache)
    config = TrainConfig(fusion=toy, shots=4, epochs=1, seed=0, batch_size=4, device="cpu", toy_gain=0.5)
    data = load_cached(entry, [config])
    result = train_head(config, data)
    assert result.tagger_kwargs["toy_gain"] == 0.5
    stem = str(tmp_path / "toy.head")
    weights, meta_path = save_checkpoint(stem, result.tagger, tagger_kwargs=result.tagger_kwargs,
                                         layers=result.layers, label_names=data.label_names, cache_meta=data.meta,
                                         cache_path=entry.path, config=config)
    head, meta = load_checkpoint(stem)
    assert isinstance(head.fusion, Toy) and head.fusion.gain == 0.5 and meta["config"]["toy_gain"] == 0.5
    hidden = torch.randn(2, 5, len(result.layers), entry.dim)
    mask = torch.ones(2, 5, dtype=torch.bool)
    with torch.no_grad():
        torch.testing.assert_close(head(hidden, mask), result.tagger.eval()(hidden, mask))

    record = tmp_path / "toy.json"
    record.write_text(json.dumps({"config": config.record(), "checkpoint": weights}))
    model = AutoModelForTokenClassification.from_pretrained(export_head(str(record), str(tmp_path / "exported")))
    assert isinstance(model.tagger.fusion, Toy) and model.tagger.fusion.gain == 0.5
    with torch.no_grad():
        torch.testing.assert_close(model.tagger.eval()(hidden, mask), head(hidden, mask))

    written = json.loads(open(meta_path).read())  # a head written before the setting existed ran its default
    del written["tagger"]["toy_gain"]
    del written["description_sha256"]  # made the way it was then: an edit of today's head would be refused
    with open(meta_path, "w") as f:
        json.dump(written, f)
    assert load_checkpoint(stem)[0].fusion.gain == GAIN.legacy == 1.0


def test_a_fusion_cannot_take_a_built_in_name_or_a_name_in_use(monkeypatch):
    """Registered as "concat", a fusion of one's own read the built-in Concat's results as its own (run
    ids name the fusion); an option named as DWAtt's was checked against DWAtt's values, and one named as
    a run setting (dropout) was used while the run's value was recorded."""
    from layerfuse.errors import LayerfuseError

    with pytest.raises(LayerfuseError, match="fusion 'concat' is built in: register Toy under another name"):
        FUSIONS["concat"] = Toy
    assert FUSIONS["concat"] is not Toy

    class Clash(Toy):
        options = (Option("layer_score", 2.0, type=float, minimum=0.0, help="another score"),)

    with pytest.raises(LayerfuseError, match="Clash declares an option 'layer_score' that dwatt declares otherwise"):
        FUSIONS["clash"] = Clash
    assert "clash" not in FUSIONS

    class Dropping(Toy):
        options = (Option("dropout", 0.5, type=float, minimum=0.0, help="the run's dropout, again"),)

    monkeypatch.setitem(FUSIONS, "dropping", Dropping)
    with pytest.raises(LayerfuseError, match="fusion 'dropping' declares option dropout, the name of a run setting"):
        TrainConfig(fusion="dropping", shots=2, epochs=1, seed=0)


def test_an_unknown_fusion_in_a_worker_says_where_to_register_it():
    """A fusion registered under `if __name__ == "__main__":` is unknown to worker processes, which unpickle
    configs unchecked: a KeyError from deep inside run_id."""
    from layerfuse.errors import LayerfuseError
    from layerfuse.training.config import default_lr

    with pytest.raises(LayerfuseError, match="registered when its module is imported"):
        default_lr("weighted")


def test_the_training_guide_names_every_tensor_of_every_head():
    # docs/guide/training.md tells a reader outside layerfuse what each tensor of a head file is
    import re
    from pathlib import Path

    from layerfuse.fusions.registry import BUILT_IN
    from layerfuse.fusions.tagger import TokenTagger

    guide = (Path(__file__).parents[2] / "docs" / "guide" / "training.md").read_text()
    section = guide.split("## A head's tensors")[1].split("\n## ")[0]
    rows = {m.group(1).strip("`"): m.group(0) for m in re.finditer(r"^\| (`\w+`|every head) \|.*$", section, re.M)}
    for fusion in BUILT_IN:
        tagger = TokenTagger(fusion=fusion, n_labels=3, n_layers=2, dim=8, num_heads=2, ffn_dim=16)
        for name in tagger.state_dict():
            name = re.sub(r"\.\d+\.", ".k.", name)
            where = rows["every head"] if name.startswith("classifier.") else rows.get(fusion, "")
            assert f"`{name}`" in where, (fusion, name)
