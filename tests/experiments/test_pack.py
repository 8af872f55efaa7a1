"""`sweep --pack K`: runs that differ in seed, N, rate or epoch cap train together as one stacked
module. A pack of one is today's sweep; a packed head keeps its solo sample, batch order, schedule,
evaluation points and numbers (dropout off); a killed packed sweep resumes without running anything
twice; and the command end to end."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from layerfuse.cache.reader import open_entry
from layerfuse.cli.sweep import main
from layerfuse.experiments import grid, run_sweep
from layerfuse.experiments.packs import pack_runs, packed
from layerfuse.experiments.results import RESULTS, read_results
from layerfuse.training import TrainConfig
from layerfuse.training.loop import Run

pytestmark = pytest.mark.usefixtures("one_thread")

# 4 shots x 3 types = 12 sentences, batches of 4: 3 steps an epoch, 15 in all, dev scored 3 times.
BASE = TrainConfig(fusion="base", shots=4, epochs=5, seed=0, batch_size=4, eval_points=3, device="cpu")
QUIET = {"workers": 0, "progress": False, "log": lambda m: None}
TOLERANCE = 1e-4  # on F1 (0..1): a packed head against its solo run, dropout off (measured: equal)


def _configs(fusions, *, trials=3, **fields):
    from dataclasses import replace

    return grid(fusions=fusions, shots=[4], epochs=[5], trials=trials, base=replace(BASE, **fields))


def _numbers(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("seconds", "versions")}


def test_pack_one_is_todays_sweep(tiny_cache, tmp_path):
    entry, configs = open_entry(tiny_cache), _configs(["concat", "dwatt"], trials=2)
    today = run_sweep(entry, configs, out=str(tmp_path / "today"), **QUIET)
    one = run_sweep(entry, configs, out=str(tmp_path / "one"), pack=1, **QUIET)
    assert list(one) == list(today) and len(one) == 4
    for rid in today:
        assert _numbers(one[rid]) == _numbers(today[rid])  # every number, to the digit
        assert "pack" not in one[rid]["seconds"]


@pytest.mark.parametrize("fusion", ["concat", "dwatt", "scalarmix", "base", "extra"])
def test_packed_heads_match_their_solo_runs(tiny_cache, tmp_path, monkeypatch, fusion):
    orders: dict = {}
    epoch_batches = Run.epoch_batches

    def logged(run):
        for order in epoch_batches(run):
            orders.setdefault(run.config.seed, []).append(order.tolist())
            yield order

    monkeypatch.setattr(Run, "epoch_batches", logged)
    entry, configs = open_entry(tiny_cache), _configs([fusion], dropout=0.0)
    solo = run_sweep(entry, configs, out=str(tmp_path / "solo"), **QUIET)
    solo_orders, orders = orders, {}
    packed = run_sweep(entry, configs, out=str(tmp_path / "packed"), pack=3, **QUIET)

    assert orders == solo_orders and len(orders) == 3  # each head its own batches, in its solo order
    assert len({r["sample_fingerprint"] for r in packed.values()}) == 3  # three samples...
    for rid, s in solo.items():
        p = packed[rid]
        assert p["seconds"]["pack"] == 3
        assert p["sample_fingerprint"] == s["sample_fingerprint"]  # ... each its solo one
        for field in ("params", "total_steps", "best_step", "n_train_sentences", "layers"):
            assert p[field] == s[field], field
        assert p["best_dev_f1"] == pytest.approx(s["best_dev_f1"], abs=TOLERANCE)
        assert p["test_f1_at_best"] == pytest.approx(s["test_f1_at_best"], abs=TOLERANCE)
        assert [e["dev_f1"] for e in p["evals"]] == pytest.approx([e["dev_f1"] for e in s["evals"]], abs=TOLERANCE)
        assert [e["train_loss"] for e in p["evals"]] == pytest.approx([e["train_loss"] for e in s["evals"]],
                                                                      rel=1e-4)
        if s["layer_usage"]:
            assert p["layer_usage"]["share"] == pytest.approx(s["layer_usage"]["share"], rel=1e-3)


def test_packs_group_runs_that_differ_in_seed_n_rate_or_cap():
    configs = (_configs(["concat", "extra"], trials=3) + _configs(["concat"], trials=3, grad_accum=2)
               + _configs(["concat"], trials=3, lr=1e-2, shots=8))
    units = pack_runs(configs, 2)
    ga = configs[6:9]
    # each run once, a pack where its first run was; a schedule's seeds pack together first, a run
    # they leave alone joins the next lone run it may pack with (concat's third seed, the third at
    # lr 1e-2); grad_accum 2 trains alone
    assert units == [tuple(configs[0:2]), (configs[2], configs[11]), tuple(configs[3:5]), (configs[5],),
                     (ga[0],), (ga[1],), (ga[2],), tuple(configs[9:11])]


def test_a_schedules_trials_pack_together_before_other_runs():
    # Figure 3's grid sorts N=8 x 50 epochs and N=16 x 25 epochs (same cost) seed by seed, interleaved;
    # their packs still hold one schedule each (one shared AdamW, one last step), as even as K allows
    configs = grid(fusions=["concat"], shots=[8, 16], epochs=[25, 50], trials=5, base=BASE)
    assert [(c.shots, c.epochs) for c in configs[5:9]] == [(8, 50), (16, 25), (8, 50), (16, 25)]
    for size, sizes in ((8, [5, 5, 5, 5]), (5, [5, 5, 5, 5]), (3, [3, 2] * 4)):
        units = pack_runs(configs, size)
        assert sorted(c.seed for u in units for c in u) == sorted(c.seed for c in configs)
        assert all(len({(c.shots, c.epochs) for c in u}) == 1 for u in units)
        assert sorted(len(u) for u in units) == sorted(sizes)


@pytest.mark.parametrize("eval_points", [3, None])
@pytest.mark.parametrize("fusion", ["concat", "extra"])
def test_a_pack_of_other_n_rates_and_caps_matches_their_solo_runs(tiny_cache, tmp_path, fusion, eval_points):
    from dataclasses import replace

    base = replace(BASE, dropout=0.0, eval_points=eval_points)
    configs = grid(fusions=[fusion], shots=[2, 4], epochs=[2, 5], trials=1, base=base, lr=[1e-3, 1e-2])
    assert len(configs) == 8 and len(pack_runs(configs, 8)) == 1  # one pack: its own N, cap and rate each
    entry = open_entry(tiny_cache)
    solo = run_sweep(entry, configs, out=str(tmp_path / "solo"), **QUIET)
    packed = run_sweep(entry, configs, out=str(tmp_path / "packed"), pack=8, **QUIET)
    assert len({r["total_steps"] for r in solo.values()}) == 4  # 2 or 3 steps an epoch, 2 or 5 epochs
    for rid, s in solo.items():
        p = packed[rid]
        assert p["seconds"]["pack"] == 8
        for field in ("sample_fingerprint", "total_steps", "steps_per_epoch", "best_step", "best_epoch"):
            assert p[field] == s[field], field
        assert [(e["step"], e["epoch"]) for e in p["evals"]] == [(e["step"], e["epoch"]) for e in s["evals"]]
        assert [e["dev_f1"] for e in p["evals"]] == pytest.approx([e["dev_f1"] for e in s["evals"]], abs=TOLERANCE)
        assert [e["train_loss"] for e in p["evals"]] == pytest.approx([e["train_loss"] for e in s["evals"]],
                                                                      rel=1e-4)
        assert p["test_f1_at_best"] == pytest.approx(s["test_f1_at_best"], abs=TOLERANCE)


def test_claimed_runs_gather_back_into_their_packs():
    a0, a1, a2, b0, b1 = _configs(["concat"], trials=3) + _configs(["dwatt"], trials=2)
    units = [(a0, a1, a2), (b0, b1)]
    # another sweep holds a1: a0 and a2 go as a pack of two; a1, once its holder died, alone
    got = list(packed(iter([a0, a2, b0, b1, None, a1]), units))
    assert got == [(a0, a2), (b0, b1), None, (a1,)]


def test_killed_packed_sweep_resumes_without_repeats(tiny_cache, tmp_path):
    entry, configs = open_entry(tiny_cache), _configs(["concat", "scalarmix"], trials=3)
    out = str(tmp_path / "out")

    def killed(config, record):
        raise KeyboardInterrupt  # the sweep dies after the first record of the first pack

    with pytest.raises(KeyboardInterrupt):
        run_sweep(entry, configs, out=out, pack=3, on_record=killed, **QUIET)
    assert len(read_results(f"{out}/{RESULTS}")) == 1
    said = []
    records = run_sweep(entry, configs, out=out, pack=3, **{**QUIET, "log": said.append})
    assert said == [f"1 of 6 runs already in {out}/{RESULTS}; running the other 5"]
    ids = [json.loads(line)["run_id"] for line in open(f"{out}/{RESULTS}")]
    assert len(ids) == len(set(ids)) == 6 and set(ids) == set(records)


def test_sweep_pack_command(tiny_cache, tmp_path):
    out = tmp_path / "cli"
    result = CliRunner().invoke(main, ["--cache", tiny_cache, "--out", str(out), "--fusions", "concat,extra",
                                       "--shots", "2", "--epochs", "2", "--trials", "2", "--eval-points", "1",
                                       "--workers", "1", "--pack", "2", "--precision", "fp32", "--quiet"])
    assert result.exit_code == 0, result.output
    records = read_results(str(out / RESULTS))
    assert len(records) == 4
    packs = {r["config"]["fusion"]: r["seconds"].get("pack") for r in records.values()}
    assert packs == {"concat": 2, "extra": 2}
    assert (out / "report.md").exists()


def test_a_cell_that_fits_is_one_pack_else_its_schedules_pack():
    # Figure 3's cells (a fusion and N: 4 caps x 5 trials) train as one pack each when 20 fit: the
    # caps then take the steps of the longest alone; with fewer a pack holds one schedule, as before
    configs = grid(fusions=["concat"], shots=[8, 16], epochs=[25, 50, 75, 100], trials=5, base=BASE)
    units = pack_runs(configs, 20)
    assert sorted((u[0].shots, len(u)) for u in units) == [(8, 20), (16, 20)]
    assert all(len({c.shots for c in u}) == 1 and len({c.epochs for c in u}) == 4 for u in units)
    assert all(len({(c.shots, c.epochs) for c in u}) == 1 for u in pack_runs(configs, 8))


@pytest.mark.parametrize("fusion", ["concat", "extra"])
def test_a_cells_epoch_caps_in_one_pack_match_their_solo_runs(tiny_cache, tmp_path, monkeypatch, fusion):
    from dataclasses import replace

    from layerfuse.training import packed as packed_module

    spans, held = [], []
    optimizer_init, rows_init = packed_module.PackOptimizer.__init__, packed_module.PackRows.__init__

    def spy_optimizer(self, pack, runs):
        optimizer_init(self, pack, runs)
        spans.append(self.spans)

    def spy_rows(self, splits):
        rows_init(self, splits)
        held.append(self.split.n_sentences)

    monkeypatch.setattr(packed_module.PackOptimizer, "__init__", spy_optimizer)
    monkeypatch.setattr(packed_module.PackRows, "__init__", spy_rows)
    configs = grid(fusions=[fusion], shots=[4], epochs=[2, 5], trials=3, base=replace(BASE, dropout=0.0))
    assert len(pack_runs(configs, 6)) == 1  # the cell: two caps x three seeds
    entry = open_entry(tiny_cache)
    solo = run_sweep(entry, configs, out=str(tmp_path / "solo"), **QUIET)
    packed = run_sweep(entry, configs, out=str(tmp_path / "packed"), pack=6, **QUIET)
    # longest first, each schedule's heads side by side: one AdamW group a schedule and leaf
    assert spans == [[(0, 3), (3, 6)]]
    assert held == [3 * 12]  # each seed's sample held once for both its caps (12 sentences a sample)
    for rid, s in solo.items():
        p = packed[rid]
        assert p["seconds"]["pack"] == 6
        for field in ("sample_fingerprint", "total_steps", "best_step", "best_epoch"):
            assert p[field] == s[field], field
        assert [e["dev_f1"] for e in p["evals"]] == pytest.approx([e["dev_f1"] for e in s["evals"]], abs=TOLERANCE)
        assert [e["train_loss"] for e in p["evals"]] == pytest.approx([e["train_loss"] for e in s["evals"]],
                                                                      rel=1e-4)
        assert p["test_f1_at_best"] == pytest.approx(s["test_f1_at_best"], abs=TOLERANCE)


def test_a_seeds_runs_in_a_pack_build_its_head_once(tiny_cache, monkeypatch):
    # A cell's epoch caps share a seed: the pack builds that seed's head once and copies it, and
    # leaves the RNG where building it would have (the dropout masks that follow are unchanged).
    from dataclasses import replace

    from layerfuse.training import load_data, tasks
    from layerfuse.training.loop import prepare_run

    data = load_data(open_entry(tiny_cache))
    configs = [replace(BASE, fusion="dwatt", epochs=e) for e in (2, 5)] + [replace(BASE, fusion="dwatt", seed=1)]
    alone = []
    for config in configs:
        run = prepare_run(config, data)
        alone.append((run.head.state_dict(), torch.get_rng_state()))
    builds = []
    head = tasks.NER.head
    monkeypatch.setattr(tasks.NER, "head", lambda self, *a, **kw: builds.append(1) or head(self, *a, **kw))
    built: dict = {}
    runs = []
    for config, (weights, rng) in zip(configs, alone):
        runs.append(prepare_run(config, data, built=built))
        assert torch.equal(torch.get_rng_state(), rng)
        for name, value in weights.items():
            assert torch.equal(runs[-1].head.state_dict()[name], value), name
    assert len(builds) == 2  # seeds 0 and 1
    assert runs[0].head is not runs[1].head  # each run trains its own copy


@pytest.mark.parametrize("fusion", ["concat", "dwatt", "scalarmix", "base", "extra"])
def test_a_solo_run_equals_a_pack_of_one(tiny_cache, fusion):
    # One loop trains both (`loop.train_runs`): the run's own module (`Solo`) or one stacked head
    # (`Stacked`); dropout off, the same weights at the best dev point, the same outputs and F1
    from dataclasses import replace

    import numpy as np

    from layerfuse.training import load_data, train_head
    from layerfuse.training.packed import train_pack

    config = replace(BASE, fusion=fusion, dropout=0.0)
    data = load_data(open_entry(tiny_cache))
    solo = train_head(config, data)
    (one,) = train_pack([config], data, keep_head=True)
    assert one.seconds["pack"] == 1 and "pack" not in solo.seconds
    for field in ("sample_fingerprint", "total_steps", "best_step", "best_epoch", "params", "layers"):
        assert getattr(one, field) == getattr(solo, field), field
    weights, solo_weights = one.tagger.state_dict(), solo.tagger.state_dict()
    assert list(weights) == list(solo_weights)
    for name, value in solo_weights.items():
        torch.testing.assert_close(_but_key_biases(name, weights[name]), _but_key_biases(name, value), rtol=1e-5,
                                   atol=1e-6, msg=name)
    batch = data.dev.take_layers(solo.layers).batch(np.arange(16), device="cpu")
    with torch.no_grad():
        torch.testing.assert_close(one.tagger(batch.hidden, batch.mask), solo.tagger(batch.hidden, batch.mask),
                                   rtol=1e-5, atol=1e-5)
    assert one.best_dev_f1 == pytest.approx(solo.best_dev_f1, abs=TOLERANCE)
    assert one.test_f1_at_best == pytest.approx(solo.test_f1_at_best, abs=TOLERANCE)
    assert [e["dev_f1"] for e in one.evals] == pytest.approx([e["dev_f1"] for e in solo.evals], abs=TOLERANCE)
    assert [e["train_loss"] for e in one.evals] == pytest.approx([e["train_loss"] for e in solo.evals], rel=1e-4)


def _but_key_biases(name: str, value):
    """``value`` with an attention's key bias zeroed: its gradient is rounding alone (a softmax ignores
    a shift every key shares), which AdamW scales to steps of the rate, so the solo and stacked sums'
    rounding moves it apart with no effect on the head's output (compared apart)."""
    if name.endswith("key.bias"):  # DWAtt
        return value * 0
    if name.endswith("in_proj_bias"):  # nn.MultiheadAttention: query, key, value
        query, _, values = value.chunk(3)
        return torch.cat([query, query * 0, values])
    return value
