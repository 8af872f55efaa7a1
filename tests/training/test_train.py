"""train-head: layer specs, loading once, an end-to-end run on a tiny BERT with its F1 pinned,
determinism, checkpoints and the CLI."""

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from cli_output import one_usage_error
from click.testing import CliRunner

from layerfuse.cache.reader import CacheSplit, open_entry
from layerfuse.cli.train import main
from layerfuse.errors import LayerfuseError
from layerfuse.fusions import FUSIONS, parameter_budget
from layerfuse.layers import parse_layers
from layerfuse.training import TrainConfig, train_head
from layerfuse.training.checkpoint import FORMERLY, load_checkpoint, save_checkpoint
from layerfuse.training.data import (
    IGNORE,
    SplitArrays,
    choose_layers,
    load_data,
    load_for_run,
)
from layerfuse.training.evaluation import predict_tags as predict
from layerfuse.training.evaluation import score as _score
from layerfuse.training.metrics import Chunker as _Chunker
from layerfuse.training.metrics import entity_f1

# dwatt on all 122 tiny train sentences, 30 epochs, lr 1e-2, seed 0: recorded on CPU (torch 2.13).
PINNED_DEV_F1 = 0.7692
E2E = dict(fusion="dwatt", shots=None, epochs=30, seed=0, lr=1e-2)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def entry(tiny_cache):
    return open_entry(tiny_cache)


@pytest.fixture(scope="module")
def data(entry):
    return load_data(entry)


@pytest.fixture(scope="module")
def trained(data):
    return train_head(TrainConfig(**E2E), data)


def test_auto_reads_only_the_chosen_layers_of_dev_and_test(entry, monkeypatch):
    reads = []
    original = CacheSplit._read_layer

    def spy(self, layer, rows):
        reads.append((self.name, layer))
        return original(self, layer, rows)

    monkeypatch.setattr(CacheSplit, "_read_layer", spy)
    data = load_for_run(entry, layers="auto:1", shots=8, seed=0)
    chosen = data.dev.layers
    assert len(chosen) == 1 and chosen[0] in (1, 2)
    assert {layer for split, layer in reads if split == "train"} == {1, 2}  # candidates, to rank them
    assert {layer for split, layer in reads if split in ("dev", "test")} == set(chosen)
    assert data.train.n_sentences == 8 * 3
    # train_head ranks the same sample the same way, whatever the order the sample was drawn in.
    _, sample = data.sample(shots=8, seed=0)
    assert choose_layers(parse_layers("auto:1", num_layers=2), sample, seed=0)[0] == chosen


def test_auto_needs_two_tags():
    split = SplitArrays("train", np.zeros((4, 2, 3), np.float16), np.zeros(4, np.int64), np.array([0, 2, 4]),
                        (1, 2), np.array([0, 1]))
    with pytest.raises(LayerfuseError, match="at least 2 tags"):
        choose_layers(parse_layers("auto:1", num_layers=2), split, seed=0)


def test_out_of_range_layers_in_a_run(data):
    with pytest.raises(LayerfuseError, match=r"layer 3 .*0\.\.2"):
        train_head(TrainConfig(fusion="base", shots=8, epochs=1, seed=0, layers="1,3"), data)


# ------------------------------------------------------------------------------ data in memory


def test_batches_pad_and_match_the_cache(data, entry):
    split = entry.split("train")
    batch = data.train.batch([3, 0, 5], device="cpu")
    lengths = np.diff(split.offsets)[[3, 0, 5]]
    assert batch.hidden.shape == (3, lengths.max(), 2, 32) and batch.hidden.dtype == torch.float32
    for j, s in enumerate([3, 0, 5]):
        want = split.hidden(sentences=[s], layers=[1, 2]).astype(np.float32)
        assert np.array_equal(batch.hidden[j, : lengths[j]].numpy(), want)
        assert batch.mask[j].sum() == lengths[j]
        assert (batch.labels[j, lengths[j]:] == IGNORE).all() and (batch.hidden[j, lengths[j]:] == 0).all()



def test_packed_batches_round_up_with_padding_rows(data):
    lengths = data.train.lengths[[3, 0, 5]]
    n = int(lengths.sum())
    plain = data.train.batch([3, 0, 5], device="cpu", packed=True)
    batch = data.train.batch([3, 0, 5], device="cpu", packed=True, multiple=32)
    rows = n + (-n % 32)
    assert batch.hidden.shape[:2] == (1, rows) and rows % 32 == 0
    assert torch.equal(batch.hidden[0, :n], plain.hidden[0]) and (batch.hidden[0, n:] == 0).all()
    assert batch.mask[0, :n].all() and not batch.mask[0, n:].any()
    assert (batch.labels[0, n:] == IGNORE).all() and torch.equal(batch.labels[0, :n], plain.labels[0])
    assert batch.lengths.tolist() == lengths.tolist()
    padded = data.train.batch([3, 0, 5], device="cpu", multiple=8)
    assert padded.hidden.shape[1] % 8 == 0 and padded.mask.sum() == n

def test_a_sample_is_picked_from_memory_without_reading_the_cache(data, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("train_head read the cache")

    monkeypatch.setattr(CacheSplit, "_read_layer", refuse)
    result = train_head(TrainConfig(fusion="scalarmix", shots=8, epochs=1, seed=0), data, keep_head=False)
    assert result.tagger is None
    old_name = train_head(TrainConfig(fusion="scalarmix", shots=8, epochs=1, seed=0), data, keep_tagger=False)
    assert old_name.tagger is None  # keep_tagger: the former name of keep_head


def test_all_of_train_or_just_the_sample_give_the_same_run(entry, data):
    config = TrainConfig(fusion="concat", shots=8, epochs=3, seed=2, lr=1e-2)
    a = train_head(config, data)
    b = train_head(config, load_for_run(entry, layers=None, shots=8, seed=2))
    assert a.evals == b.evals and a.sample_fingerprint == b.sample_fingerprint


def test_missing_sample_sentences_are_an_error(entry):
    data = load_data(entry, train_sentences=[0, 1, 2])
    with pytest.raises(LayerfuseError, match="not loaded"):
        data.sample(shots=8, seed=0)


# ------------------------------------------------------------------------------ training


def test_learns_and_is_pinned(data, trained):
    untrained = train_head(TrainConfig(**{**E2E, "epochs": 0}), data)
    assert len(untrained.evals) == 1 and untrained.best_step == 0
    assert trained.best_dev_f1 > untrained.best_dev_f1 + 0.4
    assert trained.best_dev_f1 == pytest.approx(PINNED_DEV_F1, abs=0.05)
    assert trained.test_f1_at_best is not None and trained.test_f1_at_best > 0.5
    assert len(trained.evals) == 30 and [e["epoch"] for e in trained.evals] == list(range(1, 31))
    assert trained.total_steps == 30 * trained.steps_per_epoch == 30 * 8  # 122 sentences / 16
    assert trained.layers == [1, 2] and trained.n_train_sentences == 122
    json.dumps(trained.to_dict())  # the record is plain JSON


def test_same_seed_same_run(data, trained):
    again = train_head(TrainConfig(**E2E), data)
    assert again.best_dev_f1 == trained.best_dev_f1
    assert again.evals == trained.evals


def test_f1_is_seqeval(data, trained):
    """The fast path (gold entities chunked once) gives seqeval.metrics.f1_score exactly."""
    from seqeval.metrics import f1_score
    from seqeval.metrics.sequence_labeling import get_entities

    names = np.array(data.label_names)
    dev = data.dev
    y_true = [names[dev.labels[a:b]].tolist() for a, b in zip(dev.offsets[:-1], dev.offsets[1:])]
    y_pred = [names[p].tolist() for p in predict(trained.tagger, dev, device="cpu")]
    f1, loss = _score(trained.tagger, dev, device=torch.device("cpu"), label_names=names, batch_size=64)
    assert f1 == f1_score(y_true, y_pred) and loss > 0
    rng = np.random.default_rng(0)  # ill-formed tags too (I- after O, type switches), empty sentences
    chunker = _Chunker(list(names))
    for _ in range(50):
        lengths = rng.integers(0, 9, size=30)
        true, pred = rng.integers(0, 7, lengths.sum()), rng.integers(0, 7, lengths.sum())
        cuts = np.cumsum(lengths)[:-1]
        y_true = [names[x].tolist() for x in np.split(true, cuts)]
        y_pred = [names[x].tolist() for x in np.split(pred, cuts)]
        assert chunker(true, lengths) == set(get_entities(y_true))
        assert entity_f1(chunker(true, lengths), chunker(pred, lengths)) == f1_score(y_true, y_pred, zero_division=0)


@pytest.mark.parametrize("fusion", list(FUSIONS))
def test_every_fusion_trains(data, fusion):
    result = train_head(TrainConfig(fusion=fusion, shots=8, epochs=2, seed=1, lr=1e-2, eval_every=2), data)
    assert result.n_train_sentences == 24 and result.steps_per_epoch == 2
    assert [e["step"] for e in result.evals] == [2, 4]
    assert all(np.isfinite(e["train_loss"]) and np.isfinite(e["dev_loss"]) for e in result.evals)
    assert result.params == parameter_budget(n_layers=2, dim=32, num_heads=4, ffn_dim=64, n_labels=7,
                                             extra_layers=1)[fusion]


# ------------------------------------------------------------------------------ checkpoints


def test_checkpoint_round_trip(tmp_path, data, entry, trained):
    stem = tmp_path / "head"
    save_checkpoint(str(stem), trained.tagger, tagger_kwargs=trained.tagger_kwargs, layers=trained.layers,
                    label_names=data.label_names, cache_meta=data.meta, cache_path=data.path,
                    config=TrainConfig(**E2E))
    tagger, meta = load_checkpoint(str(stem) + ".safetensors", entry=entry)
    assert meta["layers"] == [1, 2] and meta["label_names"] == data.label_names
    assert meta["config"]["fusion"] == "dwatt" and meta["cache"]["hidden_size"] == 32
    before = predict(trained.tagger, data.dev, device="cpu")
    after = predict(tagger, data.dev, device="cpu")
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    assert torch.equal(tagger.fusion.k_pos, trained.tagger.fusion.k_pos)


def test_checkpoint_against_another_backbone(tmp_path, data, trained):
    stem = str(tmp_path / "head")
    save_checkpoint(stem, trained.tagger, tagger_kwargs=trained.tagger_kwargs, layers=trained.layers,
                    label_names=data.label_names, cache_meta=data.meta)
    wider = SimpleNamespace(dim=64, num_layers=2, path="/elsewhere", meta={"model": "other"})
    with pytest.raises(LayerfuseError, match="hidden size 32 .* 64"):
        load_checkpoint(stem, entry=wider)
    deeper = SimpleNamespace(dim=32, num_layers=12, path="/elsewhere", meta={"model": "other"})
    with pytest.raises(LayerfuseError, match="layer count 2 .* 12"):
        load_checkpoint(stem, entry=deeper)
    with pytest.raises(LayerfuseError, match="does not exist"):
        load_checkpoint(str(tmp_path / "missing"))


# ------------------------------------------------------------------------------ CLI


def test_cli_trains_and_writes(tiny_cache, tmp_path):
    out = tmp_path / "runs"
    result = CliRunner().invoke(main, ["--cache", tiny_cache, "--fusion", "scalarmix", "--shots", "8",
                                       "--epochs", "2", "--seed", "1", "--lr", "0.01", "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2 and "scalarmix" in lines[0] and "best dev F1" in lines[0]
    assert lines[1].startswith("layers used (share): 1:0.") and " 2:0." in lines[1]
    record = json.loads((out / "scalarmix-n8-e2-s1.json").read_text())
    assert record["config"] == {**record["config"], "fusion": "scalarmix", "shots": 8, "epochs": 2, "seed": 1}
    assert len(record["evals"]) == 2 and record["cache_path"] == tiny_cache
    assert (out / "scalarmix-n8-e2-s1.head.safetensors").is_file()
    assert (out / "scalarmix-n8-e2-s1.head.json").is_file()


def test_cli_never_replaces_another_runs_record(tiny_cache, tmp_path):
    """The file name holds fusion, N, epochs and seed alone: a run with another --lr into the same --out
    was saved over the first one's record and head. It is refused before training; a rerun of the same
    run replaces its own."""
    out = tmp_path / "runs"
    common = ["--cache", tiny_cache, "--fusion", "scalarmix", "--shots", "8", "--epochs", "1", "--out", str(out)]
    assert CliRunner().invoke(main, [*common, "--lr", "0.01"]).exit_code == 0
    first = (out / "scalarmix-n8-e1-s0.json").read_text()
    other = CliRunner().invoke(main, [*common, "--lr", "0.005"])
    assert other.exit_code == 1 and "holds another run (lr 0.01 there, 0.005 here)" in other.output, other.output
    assert (out / "scalarmix-n8-e1-s0.json").read_text() == first and "best dev" not in other.output
    assert CliRunner().invoke(main, [*common, "--lr", "0.01"]).exit_code == 0  # the same run again


def test_cli_dry_run_prints_every_budget(tiny_cache):
    result = CliRunner().invoke(main, ["--cache", tiny_cache, "--dry-run"])
    assert result.exit_code == 0, result.output
    budget = parameter_budget(n_layers=2, dim=32, num_heads=4, ffn_dim=64, n_labels=7, extra_layers=1)
    for fusion, n in budget.items():
        assert any(line.split()[:2] == [fusion, f"{n:,}"] for line in result.stdout.splitlines()), fusion


def test_a_dry_run_extracts_nothing_and_writes_nothing(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """`train-head --dry-run --model M --dataset D` ran the whole extraction (and the bf16 speed check, written
    into the root) before printing the budgets: on roberta-large, a full cache to read a table off a config."""
    root = tmp_path / "root"
    root.mkdir()
    result = CliRunner().invoke(main, ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir), "--cache-dir",
                                       str(root), "--dry-run"])
    assert result.exit_code == 0, result.output
    budget = parameter_budget(n_layers=2, dim=32, num_heads=4, ffn_dim=64, n_labels=7, extra_layers=1)
    for fusion, n in budget.items():
        assert any(line.split()[:2] == [fusion, f"{n:,}"] for line in result.stdout.splitlines()), fusion
    assert list(root.iterdir()) == []
    pos = CliRunner().invoke(main, ["--model", str(tiny_bert_dir), "--dataset", str(tiny_conll_dir), "--cache-dir",
                                    str(root), "--dry-run", "--labels", "pos"])
    assert pos.exit_code == 0 and " labels" in pos.stdout and list(root.iterdir()) == [], pos.output


@pytest.mark.parametrize("args, match", [
    (["--shots", "1000"], "3000 sentences, but the train split has only 122"),
    (["--layers", "5"], r"layer 5 .*0\.\.2"),
    (["--shots", "many"], "'many'"),
    (["--dev-sentences", "10000"], r"--dev-sentences 10000: dev has \d+ sentences"),  # else: a false 'subset'
    (["--precision", "fp16", "--device", "cpu"], "--precision fp16 needs CUDA"),  # as its help says
])
def test_cli_errors_are_one_line(tiny_cache, args, match):
    result = CliRunner().invoke(main, ["--cache", tiny_cache, "--epochs", "1", *args])
    assert pytest.importorskip("re").search(match, one_usage_error(result))  # a wrong call: exit 2


def test_a_dev_subset_of_all_of_dev_is_refused(tiny_cache):
    from layerfuse.cache.reader import open_entry

    n_dev = open_entry(tiny_cache).split("dev").n_sentences  # every sentence: no subset, yet named as one
    result = CliRunner().invoke(main, ["--cache", tiny_cache, "--epochs", "1", "--dev-sentences", str(n_dev)])
    assert result.exit_code == 2 and f"--dev-sentences {n_dev}: dev has {n_dev} sentences" in result.stderr


# ------------------------------------------------------------------------------ precision


@pytest.mark.parametrize("fusion", ["concat", "dwatt", "extra"])
def test_bf16_runs_track_float32_runs(data, fusion):
    """Same seed, same sample: bfloat16 autocast (float32 weights and optimizer) follows the float32
    run's losses closely; it is not a different training recipe."""
    runs = {p: train_head(TrainConfig(fusion=fusion, shots=8, epochs=3, seed=0, lr=1e-3, precision=p), data,
                          keep_tagger=False) for p in ("fp32", "bf16")}
    for a, b in zip(runs["fp32"].evals, runs["bf16"].evals):
        assert math.isfinite(b["dev_loss"]) and math.isfinite(b["train_loss"])
        assert abs(a["dev_loss"] - b["dev_loss"]) < 0.05 * a["dev_loss"]
    assert runs["bf16"].config["precision"] == "bf16"


def test_a_first_release_checkpoint_loads_and_predicts_the_same():
    """A DWAtt head saved by the first release (format 1, no layer_score: the paper's unscaled score
    ran; the file as that release wrote it, under the package's former name) loads with that score and
    gives the logits that release computed."""
    here = Path(__file__).resolve().parents[1] / "data"
    tagger, meta = load_checkpoint(str(here / "first-release-dwatt.head"))
    former = FORMERLY[0]  # the file keeps the name it was written under, not edited to today's
    assert meta["format"] == former and former.removesuffix("-head") in meta["versions"]
    assert meta["format_version"] == 1 and tagger.fusion.layer_score == "paper"
    expected = json.loads((here / "first-release-dwatt.logits.json").read_text())
    hidden = torch.randn(*expected["shape"], generator=torch.Generator().manual_seed(expected["input_seed"]))
    mask = torch.ones(hidden.shape[:2], dtype=torch.bool)
    with torch.no_grad():
        torch.testing.assert_close(tagger(hidden, mask), torch.tensor(expected["logits"]), atol=1e-4, rtol=1e-4)
        tagger.fusion.layer_score = "scaled"  # read with today's default instead, it would not
        assert not torch.allclose(tagger(hidden, mask), torch.tensor(expected["logits"]), atol=1e-2)


def test_test_is_scored_once_at_the_best_dev_point(data, monkeypatch):
    """One pass over test per run, with the head at its best dev point: the same number as scoring
    that head by hand, and the same whether or not the head is kept."""
    from layerfuse.training import tasks

    calls = []
    real = tasks.score  # NER's scorer; the loop reaches it through the task

    def counting(tagger, split, **kw):
        calls.append(split.name)
        return real(tagger, split, **kw)

    monkeypatch.setattr(tasks, "score", counting)
    config = TrainConfig(fusion="concat", shots=None, epochs=6, seed=3, lr=1e-2)
    result = train_head(config, data)
    assert calls.count("test") == 1 and calls.count("dev") == 6  # once per epoch on dev, once on test
    best = result.evals[result.best_epoch - 1]
    assert best["test_f1"] == result.test_f1_at_best and sum("test_f1" in e for e in result.evals) == 1
    by_hand, _ = real(result.tagger, data.test.take_layers(result.layers), device=torch.device("cpu"),
                      label_names=data.label_names, batch_size=64)
    assert result.test_f1_at_best == by_hand
    assert train_head(config, data, keep_tagger=False).test_f1_at_best == result.test_f1_at_best


@pytest.mark.parametrize("extra, lr, score", [([], 1e-3, "scaled"), (["--protocol", "paper"], 5e-5, "paper"),
                                              (["--protocol", "paper", "--lr", "0.01"], 1e-2, "paper"),
                                              (["--protocol", "paper", "--layer-score", "learned"], 5e-5, "learned"),
                                              (["--fusion-opt", "layer_score=learned"], 1e-3, "learned")])
def test_protocol_paper_restores_the_papers_settings(tiny_cache, tmp_path, extra, lr, score):
    result = CliRunner().invoke(main, ["--cache", tiny_cache, "--fusion", "dwatt", "--shots", "2", "--epochs", "1",
                                       "--out", str(tmp_path), *extra])
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "dwatt-n2-e1-s0.json").read_text())
    assert record["config"]["lr"] == lr and record["config"]["layer_score"] == score
    head = json.loads((tmp_path / "dwatt-n2-e1-s0.head.json").read_text())
    assert head["tagger"]["layer_score"] == score and head["format_version"] == 2


@pytest.mark.parametrize("field, value", [("lr", math.inf), ("lr", math.nan), ("weight_decay", math.inf),
                                          ("max_grad_norm", math.inf)])
def test_a_setting_that_is_not_finite_is_refused(field, value):
    """--lr inf trained a head of NaN weights and exited 0; it is one line now, before any run."""
    with pytest.raises(LayerfuseError, match=f"{field} must be finite"):
        TrainConfig(fusion="concat", shots=2, epochs=1, seed=0, **{field: value})


def test_cli_names_settings_its_fusion_has_no_use_for(tiny_cache):
    """Another fusion's setting, or a z_L that Concat does not read, was dropped without a word."""
    result = CliRunner().invoke(main, ["--cache", tiny_cache, "--fusion", "concat", "--layer-score", "paper",
                                       "--query-layer", "top", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "note: concat has no use for layer_score, query_layer top: ignored" in result.stderr
    quiet = CliRunner().invoke(main, ["--cache", tiny_cache, "--fusion", "dwatt", "--layer-score", "paper",
                                      "--dry-run"])
    assert "no use for" not in quiet.stderr


@pytest.mark.parametrize("field, value, said", [
    ("seed", 0.0, "seed must be an integer, got 0.0"),  # numpy's SeedSequence, 12 frames deep
    ("epochs", 1.5, "epochs must be an integer, got 1.5"),
    ("batch_size", 2.5, "batch_size must be an integer"),  # "slice indices must be integers"
    ("epochs", None, "epochs must be an integer, got None"),
    ("lr", "1e-3", "lr must be a number, got '1e-3'"),
    ("shots", "8", "shots must be an integer or all, got '8'"),
])
def test_a_config_of_the_wrong_type_is_one_line(field, value, said):
    from layerfuse.errors import LayerfuseError

    with pytest.raises(LayerfuseError, match=re.escape(said)):
        TrainConfig(**{"fusion": "concat", "shots": 8, "epochs": 1, "seed": 0, field: value})


def test_shots_all_is_the_whole_split():
    assert TrainConfig(fusion="concat", shots="all", epochs=1, seed=0).shots is None  # as --shots all says it


def test_fp16_off_cuda_is_refused_from_python_too(tiny_cache):
    """train-head refused it; train_head ran it on a CPU, with losses unlike fp32's."""
    from layerfuse.errors import LayerfuseError
    from layerfuse.training import load_for_run

    data = load_for_run(open_entry(tiny_cache), layers=None, shots=2, seed=0)
    with pytest.raises(LayerfuseError, match="precision fp16 needs CUDA; on cpu"):
        train_head(TrainConfig(fusion="base", shots=2, epochs=1, seed=0, precision="fp16", device="cpu"), data)


def test_more_evaluation_points_than_steps_is_every_step_and_two_schedules_are_refused(data):
    """--eval-points 10**12 on a run of a few steps built a set of 10**12 steps (hung until killed);
    --eval-every with --eval-points merged both schedules where the help said one replaced the other."""
    base = TrainConfig(fusion="base", shots=1, epochs=1, seed=0, batch_size=2)
    many = train_head(TrainConfig(**{**base.__dict__, "eval_points": 10**12}), data)
    each = train_head(TrainConfig(**{**base.__dict__, "eval_every": 1}), data)
    assert [e["step"] for e in many.evals] == [e["step"] for e in each.evals] == list(range(1, len(each.evals) + 1))
    with pytest.raises(LayerfuseError, match="eval_points must be left out with eval_every"):
        TrainConfig(**{**base.__dict__, "eval_every": 2, "eval_points": 3})


def test_a_record_says_how_many_threads_it_trained_on(data):
    """A run's weights depend on torch's thread count, which no record kept: a resumed sweep mixed two in silence."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        result = train_head(TrainConfig(fusion="base", shots=1, epochs=1, seed=0), data)
    finally:
        torch.set_num_threads(before)
    assert result.to_dict()["threads"] == 1


def test_a_warmup_as_long_as_the_run_is_refused(tiny_cache, tmp_path):
    """--warmup 100 on a run of 6 steps was cut to 6 in silence: the rate rose to the last step and never
    decayed, and the record said warmup 100."""
    from layerfuse.training.loop import lr_schedule

    config = TrainConfig(fusion="concat", shots=None, epochs=1, seed=0, warmup=6)
    with pytest.raises(LayerfuseError, match="warmup 6 is not shorter than the run's 6 optimizer steps"):
        lr_schedule(config, 6)
    schedule = lr_schedule(config, 8)
    assert schedule(5) == 1.0 and schedule(7) == 0.5  # the rate decays once warmed up
    lr_schedule(config, 0)  # epochs 0: no step to warm, nothing refused
    out = CliRunner().invoke(main, ["--cache", tiny_cache, "--fusion", "concat", "--epochs", "1", "--warmup", "1000",
                                    "--out", str(tmp_path / "runs"), "--quiet"])
    assert "warmup 1000 is not shorter than the run of" in one_usage_error(out)


def test_a_grid_names_its_runs_shorter_than_their_warmup_before_any_runs(tiny_cache, tmp_path):
    """The run's own refusal stopped a grid at its first short run (mid-grid, with workers), naming no run."""
    from layerfuse.experiments import grid, run_grid

    base = TrainConfig(fusion="concat", shots=None, epochs=1, seed=0, warmup=10)
    configs = grid(fusions="concat", shots=None, epochs=[1, 40], trials=1, base=base)
    results = tmp_path / "results.jsonl"
    with pytest.raises(LayerfuseError, match=r"not shorter than the run of concat N=all 1 epochs \(8 steps\):"):
        run_grid(open_entry(tiny_cache), configs, results=str(results), workers=0, progress=False, log=lambda m: None)
    assert not results.exists()  # no run trained first
