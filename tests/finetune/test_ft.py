"""FT mode on a tiny random backbone: the backbone trains with the head (and only in FT), freezing
works, every run starts from the pretrained weights, accumulation equals a big batch, and
`train-head --mode ft` saves a backbone that `predict` uses."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

from layerfuse.cache.reader import open_entry
from layerfuse.errors import LayerfuseError
from layerfuse.finetune.data import live_data
from layerfuse.finetune.live import load_live_backbone
from layerfuse.training import TrainConfig, train_head
from layerfuse.training.checkpoint import INPUTS_CHECKSUM, inputs_sha256
from layerfuse.training.data import load_data

FT = dict(fusion="concat", shots=2, epochs=2, seed=0, lr=1e-3, mode="ft", eval_points=1)


@pytest.fixture(scope="module")
def live(tiny_cache):
    entry = open_entry(tiny_cache)
    backbone = load_live_backbone(entry.meta, device=torch.device("cpu"))
    return live_data(entry, backbone, layers=range(1, entry.num_layers + 1))


def _weights(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_ft_trains_the_backbone_and_restarts_from_pretrained(live):
    pretrained = _weights(live.backbone)
    first = train_head(TrainConfig(**FT), live)
    tuned = _weights(live.backbone)
    changed = [k for k in pretrained if not torch.equal(pretrained[k], tuned[k])]
    assert any("encoder.layer.1" in k for k in changed) and any("embeddings" in k for k in changed)
    second = train_head(TrainConfig(**FT), live)  # starts again from the pretrained weights
    assert second.best_dev_f1 == first.best_dev_f1 and second.evals == first.evals


def test_fe_leaves_every_backbone_weight_alone(tiny_cache, live):
    pretrained = _weights(live.backbone)
    data = load_data(open_entry(tiny_cache))
    train_head(TrainConfig(fusion="concat", shots=2, epochs=2, seed=0, lr=1e-3), data)
    after = _weights(live.backbone)
    assert all(torch.equal(pretrained[k], after[k]) for k in pretrained)
    with pytest.raises(LayerfuseError, match="FE mode"):
        train_head(TrainConfig(fusion="concat", shots=2, epochs=1, seed=0), live)
    with pytest.raises(LayerfuseError, match="FT mode needs the backbone"):
        train_head(TrainConfig(**FT), data)


def test_the_pooler_is_not_counted_as_trained(live):
    """BERT's pooler feeds no token head: FT's trainable backbone parameters leave it out."""
    result = train_head(TrainConfig(**FT), live)
    model = live.backbone.model
    pooler = sum(p.numel() for p in model.pooler.parameters())
    assert pooler > 0 and result.backbone_params == sum(p.numel() for p in model.parameters()) - pooler


def test_freeze_embeddings_and_bottom_layers(live):
    live.backbone.reset()
    pretrained = _weights(live.backbone)
    train_head(TrainConfig(**{**FT, "freeze": "1"}), live)
    after = _weights(live.backbone)
    same = {k for k in pretrained if torch.equal(pretrained[k], after[k])}
    assert all(k in same for k in pretrained if "embeddings" in k or "encoder.layer.0." in k)
    assert not all(k in same for k in pretrained if "encoder.layer.1." in k)


def test_gradient_accumulation_equals_the_big_batch(live):
    exact = {"dropout": 0.0, "eval_points": 2, "precision": "fp32"}  # bf16 autocast rounds by batch shape
    dropouts = [m for m in live.backbone.modules() if isinstance(m, torch.nn.Dropout)]
    kept = [m.p for m in dropouts]
    try:  # the backbone's dropout draws its masks by batch shape: off, so the two runs compute alike
        for m in dropouts:
            m.p = 0.0
        big = train_head(TrainConfig(**{**FT, **exact, "batch_size": 6}), live)
        acc = train_head(TrainConfig(**{**FT, **exact, "batch_size": 3, "grad_accum": 2}), live)
    finally:
        for m, p in zip(dropouts, kept):
            m.p = p
    assert big.total_steps == acc.total_steps
    for a, b in zip(big.evals, acc.evals):  # the same training up to float rounding, its recorded loss too
        assert a["dev_loss"] == pytest.approx(b["dev_loss"], rel=1e-5)
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)


def test_ft_cli_then_predict_uses_the_tuned_backbone(tiny_cache, tmp_path):
    from layerfuse.cli.predict import main as predict_main
    from layerfuse.cli.train import main as train_main

    out = CliRunner().invoke(train_main, ["--cache", tiny_cache, "--mode", "ft", "--fusion", "base", "--shots", "2",
                                          "--epochs", "1", "--lr", "1e-3", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    record = json.loads((tmp_path / "base-ft-n2-e1-s0.json").read_text())
    assert f"params + {record['backbone_params']:,} of the backbone" in out.output  # FT trains both
    stem = tmp_path / "base-ft-n2-e1-s0"
    meta = json.loads((tmp_path / "base-ft-n2-e1-s0.head.json").read_text())
    assert meta["backbone_path"] == "base-ft-n2-e1-s0.backbone" and (tmp_path / meta["backbone_path"]).is_dir()
    head_mode = (tmp_path / "base-ft-n2-e1-s0.head.safetensors").stat().st_mode & 0o777
    modes = {f.name: f.stat().st_mode & 0o777 for f in (tmp_path / meta["backbone_path"]).iterdir()}
    assert modes == dict.fromkeys(modes, head_mode), modes  # safetensors wrote the backbone 0600: unshareable
    assert json.loads(stem.with_suffix(".json").read_text())["config"]["mode"] == "ft"
    pred = CliRunner().invoke(predict_main, ["--head", str(tmp_path / "base-ft-n2-e1-s0.head"), "--json",
                                             "--text", "Alice met Bob in Paris"])
    assert pred.exit_code == 0, pred.output
    assert len(json.loads(pred.output)["tags"]) == 5
    assert (tmp_path / meta["backbone_path"]).stat().st_mode & 0o777 == tmp_path.stat().st_mode & 0o777
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".backbone-")]  # written whole, then moved

    def predict():
        return CliRunner().invoke(predict_main, ["--head", str(stem) + ".head", "--text", "Alice met Bob"])

    weights = tmp_path / meta["backbone_path"] / "model.safetensors"
    tuned = weights.read_bytes()
    weights.write_bytes(tuned[:-4] + bytes(4))  # another run's backbone put in its place, say
    assert predict().exit_code == 1 and "is not the one tuned with this head" in predict().output
    weights.write_bytes(tuned)
    shutil.move(tmp_path / meta["backbone_path"], tmp_path / "elsewhere")
    gone = predict()
    assert gone.exit_code == 1 and "its fine-tuned backbone" in gone.output and "is missing" in gone.output
    shutil.move(tmp_path / "elsewhere", tmp_path / meta["backbone_path"])
    without = {k: v for k, v in meta.items() if k not in ("backbone_path", "backbone_sha256")}  # as a sweep kept it
    without[INPUTS_CHECKSUM] = inputs_sha256(without)
    (tmp_path / "base-ft-n2-e1-s0.head.json").write_text(json.dumps(without))
    assert predict().exit_code == 1 and "saved without its fine-tuned backbone" in predict().output


def test_an_ft_head_edited_to_another_mode_is_refused_and_one_moved_with_its_backbone_loads(tiny_cache, tmp_path):
    """An FT head whose mode was edited away from ft skipped its backbone's hash check and loaded the folder its
    JSON named, whatever it held; the run folder moved whole (head and backbone) still loads."""
    from layerfuse.cli.predict import main as predict_main
    from layerfuse.cli.train import main as train_main

    runs = tmp_path / "runs"
    out = CliRunner().invoke(train_main, ["--cache", tiny_cache, "--mode", "ft", "--fusion", "base", "--shots", "2",
                                          "--epochs", "1", "--lr", "1e-3", "--out", str(runs), "--quiet"])
    assert out.exit_code == 0, out.output
    moved = tmp_path / "moved"
    shutil.move(runs, moved)
    head = moved / "base-ft-n2-e1-s0.head.json"

    def predict():
        return CliRunner().invoke(predict_main, ["--head", str(head), "--text", "Alice met Bob"])

    assert predict().exit_code == 0, predict().output  # backbone_path is relative; its content hash is checked
    meta = json.loads(head.read_text())
    meta["config"]["mode"] = "fe"
    head.write_text(json.dumps(meta))
    edited = predict()
    assert edited.exit_code == 1 and "what decides its inputs" in edited.stderr and str(head) in edited.stderr
    del meta[INPUTS_CHECKSUM]  # a head written before that checksum, edited: its backbone is still not loaded
    head.write_text(json.dumps(meta))
    older = predict()
    assert older.exit_code == 1 and "names a tuned backbone" in older.stderr, older.output


def test_ft_with_ranked_layers_is_one_line():
    """auto:K and xie score a frozen backbone's cached layers: FT failed in an AttributeError."""
    with pytest.raises(LayerfuseError, match="named with --mode ft"):
        TrainConfig(fusion="concat", shots=2, epochs=1, seed=0, mode="ft", layers="auto:2")


def test_freeze_is_checked(tiny_cache, tmp_path):
    """`--freeze 7` on a shallower backbone froze every layer in silence; `--freeze` in FE mode was ignored,
    yet stored in the run's record."""
    from layerfuse.cli.train import main as train_main

    args = ["--cache", tiny_cache, "--fusion", "base", "--shots", "2", "--epochs", "1", "--out", str(tmp_path)]
    deep = CliRunner().invoke(train_main, [*args, "--mode", "ft", "--freeze", "7"])
    assert deep.exit_code == 2 and "Error: --freeze 7: the backbone has 2 layers" in deep.output, deep.output
    fe = CliRunner().invoke(train_main, [*args, "--freeze", "1"])
    assert fe.exit_code == 2 and "freeze must be left out without --mode ft" in fe.output, fe.output


def test_a_mask_seed_is_checked_wherever_it_comes_from():
    """A server's job took a mask seed the CLI refuses (184467440737095516150)."""
    from layerfuse.extract.masking import MaskingSpec

    with pytest.raises(LayerfuseError, match="--mask-seed 184467440737095516150 is not in 0..4294967295"):
        MaskingSpec(seed=184467440737095516150)


def test_ft_on_a_subword_entry_is_refused_before_the_backbone_loads(tiny_bert_dir, tiny_conll_dir, tmp_path,
                                                                    monkeypatch):
    from layerfuse.experiments import loaders
    from layerfuse.extract.run import ExtractConfig, extract
    from layerfuse.finetune import live

    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), granularity="subword",
                           cache_dir=str(tmp_path), unit_rows=256, splits=("train", "dev"))
    entry = open_entry(extract(config, progress=False, log=lambda m: None).path)
    monkeypatch.setattr(live, "load_live_backbone", lambda *a, **k: pytest.fail("the backbone was loaded"))
    with pytest.raises(LayerfuseError, match="FT mode needs a word-level cache"):
        loaders.load_live(entry, [TrainConfig(**FT)])
