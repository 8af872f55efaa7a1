"""A sweep keeps the heads its user wants (`--keep-heads`), named in results.jsonl by paths relative to it,
and `layerfuse export` takes a sweep's folder with a run id or --best: a sweep's winner leaves the tool as a
transformers model."""

from __future__ import annotations

import json
import os
import shlex
import shutil

import pytest
from click.testing import CliRunner

from layerfuse.cli.main import main as cli
from layerfuse.errors import LayerfuseError
from layerfuse.experiments.heads import (
    KEEP_HEADS,
    cell_of,
    head_files,
    heads_dir,
    kept_heads,
    record_run,
    sweep_head,
)
from layerfuse.experiments.results import RESULTS, append_result, read_results, run_id

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(seed, fusion="concat"):
    return {"fusion": fusion, "shots": 2, "epochs": 2, "seed": seed, "lr": 1e-3}


def _finished(results, seed, f1, fusion="concat"):
    """A run's record, and the head files its worker would have written."""
    config = _config(seed, fusion)
    rid = run_id(config)
    folder = heads_dir(str(results))
    os.makedirs(folder, exist_ok=True)
    for path in head_files(folder, rid)[:2]:
        open(path, "w").close()
    return {"run_id": rid, "config": config, "best_dev_f1": f1, "cache_key": "k"}


def test_best_keeps_one_head_per_cell_and_records_who_won(tmp_path):
    results = tmp_path / RESULTS
    for seed, f1 in ((0, 0.4), (1, 0.7), (2, 0.5)):
        record_run(str(results), _finished(results, seed, f1), keep="best")
    record_run(str(results), _finished(results, 0, 0.1, fusion="dwatt"), keep="best")  # another cell
    records = read_results(str(results))
    winner, dwatt = run_id(_config(1)), run_id(_config(0, "dwatt"))
    assert set(kept_heads(heads_dir(str(results)))) == {winner, dwatt}  # the heads folder: what is kept
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["run_id"] for r in lines] == list(records) and len(lines) == 4  # each run once, never rewritten
    assert all(r["checkpoint"] is None and r["keep_heads"] == "best" for r in lines)  # a later run may replace it
    # the hash lies in the heads folder's record alone: a line said it for a head beaten and deleted later, so
    # results.jsonl differed by which run finished first
    assert not any("head_sha256" in r for r in lines) and kept_heads(heads_dir(str(results)))[winner]["head_sha256"]
    on_disk = sorted(os.listdir(heads_dir(str(results))))
    assert on_disk == sorted([".layerfuse.lock", *(os.path.basename(p) for rid in (winner, dwatt)
                                         for p in head_files("", rid))])
    beside = json.loads(open(head_files(heads_dir(str(results)), winner)[2]).read())
    assert beside["checkpoint"] == f"{winner}.head.safetensors"  # relative to the run record itself
    assert cell_of(_config(1)) == cell_of(_config(2)) != cell_of(_config(1, "dwatt"))


def test_best_after_all_never_deletes_a_head_kept_under_all_and_weighs_the_best_of_them(tmp_path):
    """A sweep kept every head (all), then one reruns its --out with more trials under best: the heads kept
    under all stay (their records name them), and a new head is kept only if it beats the best of the cell."""
    results = tmp_path / RESULTS
    for seed, f1 in ((0, 0.4), (1, 0.7)):
        record_run(str(results), _finished(results, seed, f1), keep="all")
    everything = {run_id(_config(0)), run_id(_config(1))}
    record_run(str(results), _finished(results, 2, 0.5), keep="best")  # beats seed 0 alone: not the cell's best
    assert set(kept_heads(heads_dir(str(results)))) == everything
    record_run(str(results), _finished(results, 3, 0.9), keep="best")
    assert set(kept_heads(heads_dir(str(results)))) == everything | {run_id(_config(3))}
    record_run(str(results), _finished(results, 4, 0.95), keep="best")  # replaces the head best kept, no other
    assert set(kept_heads(heads_dir(str(results)))) == everything | {run_id(_config(4))}


def test_all_and_none(tmp_path):
    every = tmp_path / "all" / RESULTS
    for seed, f1 in ((0, 0.4), (1, 0.3)):
        record_run(str(every), _finished(every, seed, f1), keep="all")
    assert all(r["checkpoint"] for r in read_results(str(every)).values())
    nothing = tmp_path / "none" / RESULTS
    rid = run_id(_config(0))
    record_run(str(nothing), {"run_id": rid, "config": _config(0), "best_dev_f1": 0.5}, keep="none")
    assert read_results(str(nothing))[rid].get("checkpoint") is None
    with pytest.raises(LayerfuseError, match="kept no head: it ran under --keep-heads none, or before heads were "
                                             "kept$"):
        sweep_head(str(nothing.parent), run=rid)


def test_best_names_a_better_run_that_kept_no_head(tmp_path):
    """An older sweep's --out (no heads kept) extended with a seed: --best exported the one kept head as
    the best although an older run had scored higher on dev, and said nothing."""
    results = tmp_path / RESULTS
    record_run(str(results), _finished(results, 0, 0.9), keep="none")  # before heads were kept
    record_run(str(results), _finished(results, 1, 0.6), keep="best")
    said = []
    beside = sweep_head(str(tmp_path), best=True, log=said.append)
    assert os.path.basename(beside) == f"{run_id(_config(1))}.json"  # the best kept head, still exported
    assert said == [f"note: run {run_id(_config(0))} scored better on dev but kept no head (it ran before heads "
                    f"were kept, or under --keep-heads none); exporting the best kept head, run {run_id(_config(1))}"]
    record_run(str(results), _finished(results, 2, 0.95), keep="best")  # now the best run is kept: nothing to say
    said.clear()
    sweep_head(str(tmp_path), best=True, log=said.append)
    assert said == []


def test_sweep_then_export_of_its_best_run_loads_in_a_pipeline(tiny_cache, tmp_path):
    from transformers import pipeline

    import layerfuse  # noqa: F401 -- registers the model type with the auto classes

    out = tmp_path / "my sweep"  # a space: the export command the sweep prints is still pasted as is
    args = ["sweep", "--cache", str(tiny_cache), "--out", str(out), "--fusions", "concat", "--shots", "2",
            "--epochs", "3", "--trials", "3", "--lrs", "0.01", "--eval-points", "1", "--workers", "1", "--quiet"]
    run = CliRunner().invoke(cli, args)  # --keep-heads best, the default
    assert run.exit_code == 0, run.output
    assert "1 head kept in" in run.stderr
    hint = shlex.split(run.stderr.split("export the best: layerfuse ")[1].splitlines()[0])
    assert hint == ["export", str(out), "--best", "--out", "models/NAME"]
    records = read_results(str(out / RESULTS))
    assert len(records) == 3 and len((out / RESULTS).read_text().splitlines()) == 3
    best = max(records.values(), key=lambda r: r["best_dev_f1"])
    kept = kept_heads(str(out / "heads"))
    assert list(kept) == [best["run_id"]]
    assert not os.path.isabs(kept[best["run_id"]]["checkpoint"])

    moved = tmp_path / "moved"  # the folder copied elsewhere still exports: nothing names where it was
    shutil.copytree(out, moved)
    shutil.rmtree(out)
    model = tmp_path / "model"
    export = CliRunner().invoke(cli, ["export", str(moved), "--best", "--out", str(model)])
    assert export.exit_code == 0, export.output
    config = json.loads((model / "config.json").read_text())
    assert config["layerfuse"]["seed"] == best["config"]["seed"]
    assert config["layerfuse"]["best_dev_f1"] == pytest.approx(best["best_dev_f1"])
    ner = pipeline("token-classification", model=str(model), aggregation_strategy="simple", device="cpu")
    assert type(ner.model).__name__ == "LayerfuseForTokenClassification"
    assert isinstance(ner("Alice met Bobson in Paris."), list)

    loser = next(rid for rid in records if rid != best["run_id"])
    refused = CliRunner().invoke(cli, ["export", str(moved), "--run", loser, "--out", str(tmp_path / "m2")])
    assert refused.exit_code == 1 and f"run {best['run_id']} of its cell scored " in refused.output
    by_cell = CliRunner().invoke(cli, ["export", str(moved), "--run", loser, "--best", "--out", str(tmp_path / "m3")])
    assert by_cell.exit_code == 0, by_cell.output
    unnamed = CliRunner().invoke(cli, ["export", str(moved), "--out", str(tmp_path / "m4")])
    assert unnamed.exit_code == 1 and "--run RUN_ID, or --best" in unnamed.output
    head = moved / "heads" / f"{best['run_id']}.head.json"  # a kept head's JSON edited: refused as train-head's
    meta = json.loads(head.read_text())
    meta["cache"]["pooling"] = "last"
    head.write_text(json.dumps(meta))
    edited = CliRunner().invoke(cli, ["export", str(moved), "--best", "--out", str(tmp_path / "m5")])
    assert edited.exit_code == 1 and "what decides its inputs" in edited.output, edited.output


def test_a_run_without_a_head_is_told_which_run_beat_it_if_one_did(tmp_path):
    """The error named the first kept head of the cell as the run that "scored better", whatever its score."""
    results = tmp_path / RESULTS
    for seed, f1 in ((0, 0.3), (1, 0.2)):
        record_run(str(results), _finished(results, seed, f1), keep="all")
    record_run(str(results), _finished(results, 2, 0.6), keep="none")  # the best of its cell, no head kept
    record_run(str(results), _finished(results, 3, 0.25), keep="none")
    with pytest.raises(LayerfuseError, match=f"run {run_id(_config(0))} of its cell scored better"):
        sweep_head(str(tmp_path), run=run_id(_config(3)))  # 0.3 beat it, not 0.2
    with pytest.raises(LayerfuseError, match=f"kept no head: it ran under --keep-heads none, or before heads were "
                                             f"kept; the best kept head of its cell is run {run_id(_config(0))}"):
        sweep_head(str(tmp_path), run=run_id(_config(2)))  # nothing beat it


def test_best_compares_heads_of_one_label_set(tmp_path):
    """A chunker's F1 beat a NER head's, and --best exported the chunker."""
    results = tmp_path / RESULTS
    record_run(str(results), _finished(results, 0, 0.4), keep="best")
    config = {**_config(1), "labels": "chunk"}
    for path in head_files(heads_dir(str(results)), run_id(config))[:2]:
        open(path, "w").close()
    chunk = {"run_id": run_id(config), "config": config, "best_dev_f1": 0.65, "cache_key": "k"}
    record_run(str(results), chunk, keep="best")
    with pytest.raises(LayerfuseError, match="kept heads of the label sets chunk, ner: --best compares one"):
        sweep_head(str(tmp_path), best=True)
    beside = sweep_head(str(tmp_path), best=True, run=run_id(_config(0)))  # one set named by a run of it
    assert os.path.basename(beside) == f"{run_id(_config(0))}.json"


def test_a_tie_keeps_the_lower_seed_whichever_finished_first(tmp_path):
    """Ties kept the first to finish: with two workers, which head `export --best` gave hung on timing."""
    for order in ((1, 0), (0, 1)):
        results = tmp_path / "".join(map(str, order)) / RESULTS
        for seed in order:
            record_run(str(results), _finished(results, seed, 0.5), keep="best")
        assert set(kept_heads(heads_dir(str(results)))) == {run_id(_config(0))}
        lines = sorted(results.read_text().splitlines())
        assert lines == sorted((tmp_path / "10" / RESULTS).read_text().splitlines())  # the same lines either way


def test_best_compares_heads_scored_on_one_dev_set(tmp_path):
    """A head's F1 on a 3-sentence dev subset beat one on all of dev, and --best exported it."""
    results = tmp_path / RESULTS
    record_run(str(results), _finished(results, 0, 0.4), keep="best")
    config = {**_config(1), "dev_sentences": 3}
    for path in head_files(heads_dir(str(results)), run_id(config))[:2]:
        open(path, "w").close()
    record_run(str(results), {"run_id": run_id(config), "config": config, "best_dev_f1": 0.9, "cache_key": "k"},
               keep="best")
    with pytest.raises(LayerfuseError, match=r"heads scored on different dev sets \(all of dev, 3 sentences\)"):
        sweep_head(str(tmp_path), best=True)
    beside = sweep_head(str(tmp_path), best=True, run=run_id(_config(0)))  # one dev set named by a run of it
    assert os.path.basename(beside) == f"{run_id(_config(0))}.json"


def _diverged(record: dict) -> dict:
    """``record`` of a run whose training loss went nan at its second evaluation."""
    nan = float("nan")
    return {**record, "evals": [{"step": 1, "train_loss": 0.7, "dev_loss": 1.0},
                                {"step": 2, "train_loss": nan, "dev_loss": nan}]}


@pytest.mark.parametrize("keep", ["best", "all"])
def test_a_diverged_run_keeps_no_head_and_best_exports_a_trained_one(tmp_path, keep):
    """A diverged run kept its head like any other (weights all nan under --lrs 1e10): --best exported it when
    its broken F1 was the cell's highest, or failed on its nan weights rather than choose a trained head."""
    results = tmp_path / RESULTS
    record_run(str(results), _finished(results, 0, 0.4), keep=keep)
    record_run(str(results), _diverged(_finished(results, 1, 0.9)), keep=keep)
    folder = heads_dir(str(results))
    assert set(kept_heads(folder)) == {run_id(_config(0))}
    assert not any(os.path.exists(p) for p in head_files(folder, run_id(_config(1))))
    assert read_results(str(results))[run_id(_config(1))]["checkpoint"] is None
    assert os.path.basename(sweep_head(str(tmp_path), best=True)) == f"{run_id(_config(0))}.json"
    with pytest.raises(LayerfuseError, match="kept no head: it diverged"):
        sweep_head(str(tmp_path), run=run_id(_config(1)))


def test_best_never_exports_a_diverged_head_an_earlier_release_kept(tmp_path):
    """Heads of diverged runs kept before are ranked below every trained one, and --best refuses a cell that
    holds only them, in one line."""
    results = tmp_path / RESULTS
    folder = heads_dir(str(results))
    lost = _diverged(_finished(results, 0, 0.9))
    weights, _, beside = head_files(folder, lost["run_id"])
    with open(beside, "w") as f:  # as a release that kept every head wrote it
        json.dump({**lost, "checkpoint": os.path.basename(weights)}, f)
    append_result(str(results), {**lost, "keep_heads": "all", "checkpoint": f"heads/{os.path.basename(weights)}"})
    with pytest.raises(LayerfuseError, match="every head kept for .* is of a run that diverged"):
        sweep_head(str(tmp_path), best=True)
    record_run(str(results), _finished(results, 1, 0.2), keep="best")
    assert os.path.basename(sweep_head(str(tmp_path), best=True)) == f"{run_id(_config(1))}.json"


def test_best_reads_each_kept_record_once_not_every_kept_record_for_every_run(tmp_path, monkeypatch):
    """Each run read the record of every head kept so far to find the few of its own cell: a sweep of many
    cells was quadratic in its runs. Now a run reads only its own cell's kept record, whatever the folder holds."""
    from layerfuse.experiments import heads

    results = tmp_path / RESULTS
    folder = heads_dir(str(results))
    reads, real_open = [], open

    def counting_open(path, *args, **kwargs):
        if os.path.dirname(str(path)) == folder and str(path).endswith(".json") and ".head." not in str(path):
            reads.append(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(heads, "open", counting_open, raising=False)
    cells, trials = 8, 3
    for seed in range(trials):
        for cell in range(cells):
            record = _finished(results, seed, 0.5 + 0.01 * seed * (-1) ** cell)
            record["config"] = config = {**record["config"], "lr": 1e-4 * (cell + 1)}
            record["run_id"] = run_id(config)
            for path in head_files(folder, record["run_id"])[:2]:
                open(path, "w").close()
            record_run(str(results), record, keep="best")
    assert len(reads) <= cells * trials  # one kept rival a run at most (it read 8 a run once the cells had theirs)
    kept = kept_heads(folder)
    assert len(kept) == cells and {r["config"]["seed"] for r in kept.values()} == {0, 2}  # what best keeps, as ever


@pytest.mark.parametrize("keep", KEEP_HEADS)
def test_recording_a_run_reads_only_the_lines_appended_since(tmp_path, monkeypatch, keep):
    """Each run recorded asked twice whether the results file held it, reading the file whole each time: with
    tens of thousands of runs in one file, recording grew with the square of the runs. Read once each, a line
    appended by another sweep still stops a second record of its run, a line cut short is passed by, and a
    file replaced or truncated by hand is read again from its start."""
    from layerfuse.experiments import results as module

    read = []

    class Counted:  # the results file, its lines counted as they are read
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def __iter__(self):
            for raw in self.f:
                read.append(raw)
                yield raw

        def __getattr__(self, name):
            return getattr(self.f, name)

    monkeypatch.setattr(module, "open", lambda *a, **k: Counted(open(*a, **k)), raising=False)
    results = tmp_path / RESULTS
    line = {s: json.dumps({"run_id": run_id(_config(s)), "config": _config(s), "best_dev_f1": 0.5,
                           "cache_key": "k"}) + "\n" for s in range(100)}
    results.write_text("".join(line[s] for s in range(50, 100)))  # another cell's runs
    for seed in range(5):
        record_run(str(results), _finished(results, seed, 0.1 * seed, fusion="dwatt"), keep=keep)
    assert len(read) <= 50 + 5  # each line once: the runs there, then each one appended

    def lines_of(seed):
        return [raw for raw in results.read_text().splitlines(keepends=True)
                if f'"run_id": "{run_id(_config(seed))}"' in raw]

    with open(results, "a") as f:  # recorded by another sweep meanwhile: not a second time
        f.write(line[5] + line[6][:20])  # and a line cut short by a kill
    record_run(str(results), _finished(results, 5, 0.9), keep=keep)
    assert lines_of(5) == [line[5]]
    record_run(str(results), _finished(results, 6, 0.9), keep=keep)
    assert len(lines_of(6)) == 1 and read_results(str(results))[run_id(_config(6))]["best_dev_f1"] == 0.9
    restored = tmp_path / "restored.jsonl"  # another file moved in: read from its start
    restored.write_text(line[7] + line[50])
    os.replace(restored, results)
    record_run(str(results), _finished(results, 7, 0.9), keep=keep)
    record_run(str(results), _finished(results, 51, 0.9), keep=keep)
    assert lines_of(7) == [line[7]] and len(lines_of(51)) == 1
    results.write_text(line[8])  # truncated in place, shorter
    record_run(str(results), _finished(results, 7, 0.9), keep=keep)
    record_run(str(results), _finished(results, 8, 0.9), keep=keep)
    assert len(lines_of(7)) == 1 and lines_of(8) == [line[8]]


def test_a_results_file_rewritten_in_place_is_read_afresh(tmp_path):
    """A results file made anew often gets its inode back at once, and run lines of one length put every line
    end where it was: the index of recorded runs read on as if the file had grown, said a run it held was
    not there, and that one it no longer held was (its line was then never written)."""
    from layerfuse.experiments.results import recorded

    path = str(tmp_path / RESULTS)

    def lines(*ids):
        return "".join(json.dumps({"run_id": rid, "x": 1}) + "\n" for rid in ids).encode()

    with open(path, "wb") as f:
        f.write(lines("A", "B"))
    assert recorded(path, "A") and recorded(path, "B")
    for now, ids in ((10**18, ("C", "D")), (2 * 10**18, ("E", "F", "G"))):  # the same length, then longer
        with open(path, "r+b") as f:  # the same file (inode), rewritten from its start
            f.truncate(0)
            f.write(lines(*ids))
        os.utime(path, ns=(now, now))  # as the clock moves between two writes
        assert all(recorded(path, rid) for rid in ids) and not recorded(path, "A"), ids
    assert append_result(path, {"run_id": "A", "x": 1})  # a run the file no longer holds is written again


def test_runs_on_a_primary_set_recorded_before_and_after_it_was_named_are_one_set(tmp_path):
    """Runs on a POS entry's primary set recorded no set before records named it, and read as "ner": a sweep
    resumed after the upgrade kept heads of "the label sets ner, pos", and export --best refused it."""
    results = tmp_path / RESULTS
    record_run(str(results), _finished(results, 0, 0.4), keep="all")  # as an older release wrote it
    record_run(str(results), {**_finished(results, 1, 0.6), "label_set": "pos"}, keep="all")
    best = sweep_head(str(tmp_path), best=True)
    assert os.path.basename(best) == f"{run_id(_config(1))}.json"
