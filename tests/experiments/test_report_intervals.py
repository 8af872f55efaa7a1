"""Intervals that do not mislead, and grids of `--shots all`: Figure 3's bands stay inside the metric's
range, a cell of fewer than 3 trials gets no band and both the figure and the report say why, and a
grid with no N at all still writes its report (it once crashed in the plot, report.md never written)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import kept_figures

from layerfuse.experiments import report


def _record(fusion, shots, epochs, seed, f1):
    return {"run_id": f"{fusion}-{shots}-{epochs}-{seed}",
            "config": {"fusion": fusion, "shots": shots, "epochs": epochs, "seed": seed, "lr": 1e-3},
            "best_dev_f1": f1, "test_f1_at_best": f1, "model": "m", "dataset": "d",
            "evals": [{"step": 1, "dev_f1": f1 / 2}, {"step": 2, "dev_f1": f1}], "seconds": {"total": 1.0}}


@pytest.fixture
def figures(monkeypatch):
    """Every figure drawn while the test runs, kept open: {file name: figure}."""
    return kept_figures(monkeypatch)


def _band_ys(fig) -> np.ndarray:
    return np.concatenate([p.vertices[:, 1] for ax in fig.axes for c in ax.collections for p in c.get_paths()])


def test_bands_are_clipped_to_the_metric_range(figures, tmp_path):
    # Means near both ends with wide intervals: unclipped, the bands would reach 108 and -4.
    stats = {("concat", 8, 25): (2.0, 6.0), ("concat", 16, 25): (50.0, 10.0), ("concat", 32, 25): (98.0, 10.0)}
    report.draw_f1_vs_shots(stats, str(tmp_path / "f.png"), trials=dict.fromkeys(stats, 5))
    ys = _band_ys(figures["f.png"])
    assert ys.min() == pytest.approx(0.0) and ys.max() == pytest.approx(100.0)
    assert 40.0 in ys and 60.0 in ys  # inside the range, the interval is drawn as it is


def test_a_sweep_of_two_trials_draws_no_band_and_says_so(figures, tmp_path):
    records = [_record("concat", n, 25, seed, f1) for n in (8, 16) for seed, f1 in ((0, 0.05), (1, 0.6))]
    mean, half = report.ci95([5.0, 60.0])
    assert mean - half < -300  # what the band would have shown
    report.render(records, str(tmp_path))
    fig = figures["f1_vs_shots.png"]
    assert not any(ax.collections for ax in fig.axes)
    note = " ".join(fig._suptitle.get_text().split())  # wrapped to the figure's width
    assert "no interval drawn where a cell has fewer than 3 trials (n = 2)" in note
    box = fig._suptitle.get_window_extent()  # one panel: the note was cut at both edges
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width
    text = (tmp_path / "report.md").read_text()
    assert "fewer than 3 trials (as few as 2): their ± is only indicative" in text


def test_the_note_of_few_trials_names_an_accuracy_sweeps_figure_by_its_metric(figures, tmp_path):
    """A POS sweep's report said "f1_vs_shots.png draws no band" as if the figure drew F1: the file keeps its
    name, the note says what it draws; an F1 sweep's note is unchanged. The title names the label set."""
    records = [{**_record("concat", n, 25, seed, 0.0), "best_dev_f1": None, "best_dev_accuracy": acc,
                "test_accuracy_at_best": acc, "evals": [{"step": 1, "dev_accuracy": acc}], "label_set": "pos"}
               for n in (8, 16) for seed, acc in ((0, 0.5), (1, 0.6))]
    report.render(records, str(tmp_path))
    text = (tmp_path / "report.md").read_text()
    assert "f1_vs_shots.png (best dev accuracy against N) draws no band for them." in text
    assert text.startswith("# Sweep: m on d, pos labels\n")
    report.render([_record("concat", n, 25, seed, 0.5) for n in (8, 16) for seed in (0, 1)], str(tmp_path))
    assert ", and f1_vs_shots.png draws no band for them." in (tmp_path / "report.md").read_text()


def test_three_trials_get_their_band_and_no_notice(figures, tmp_path):
    records = [_record("concat", n, 25, seed, 0.5 + 0.01 * seed) for n in (8, 16) for seed in range(3)]
    report.render(records, str(tmp_path))
    assert any(ax.collections for ax in figures["f1_vs_shots.png"].axes)
    assert "no interval" not in figures["f1_vs_shots.png"]._suptitle.get_text()
    assert "only indicative" not in (tmp_path / "report.md").read_text()


def test_a_cell_without_banded_neighbours_gets_a_bar(figures, tmp_path):
    """With one N a band has no width: the legend said "95% CI over trials" over nothing drawn."""
    stats = {("concat", 8, 25): (50.0, 10.0)}
    report.draw_f1_vs_shots(stats, str(tmp_path / "f.png"), trials=dict.fromkeys(stats, 5))
    [ax] = figures["f.png"].axes
    bars = [c for c in ax.collections if hasattr(c, "get_segments")]  # the errorbar's vertical line
    assert [s.tolist() for c in bars for s in c.get_segments()] == [[[8.0, 40.0], [8.0, 60.0]]]


def test_a_grid_of_the_whole_train_split_reports_without_an_n_axis(figures, tmp_path):
    records = [_record(f, None, 25, seed, 0.5) for f in ("concat", "dwatt") for seed in range(3)]
    paths = report.render(records, str(tmp_path))
    assert "shots" not in paths and not (tmp_path / "f1_vs_shots.png").exists()
    assert (tmp_path / "f1_vs_step.png").is_file() and figures["f1_vs_step.png"].axes[0].get_title() == \
        "N = all, 25 epochs"
    assert "| concat | all | 25 |" in (tmp_path / "report.md").read_text()


def test_the_whole_train_split_beside_some_n_is_drawn_at_all_apart_from_the_line(figures, tmp_path):
    """`--shots 8,32,all`: the runs on the whole split were left out of Figure 3 without a word."""
    records = [_record("concat", n, 25, seed, f1 + 0.01 * seed) for n, f1 in ((8, 0.3), (32, 0.5), (None, 0.8))
               for seed in range(3)]
    paths = report.render(records, str(tmp_path))
    [ax] = figures["f1_vs_shots.png"].axes
    assert paths["shots"] and [t.get_text() for t in ax.get_xticklabels()] == ["8", "32", "all"]
    lines = {tuple(line.get_xdata()): line for line in ax.get_lines() if line.get_label() == "concat"}  # no caps
    assert set(lines) == {(8, 32), (64,)}  # the whole split one doubling right of the largest N
    assert lines[64,].get_linestyle() == "None" and lines[64,].get_ydata()[0] == pytest.approx(81.0)
    bars = [c for c in ax.collections if hasattr(c, "get_segments")]  # its interval, as a bar
    assert [s[0][0] for c in bars for s in c.get_segments()] == [64.0]
    assert report.stats_from_table((tmp_path / "report.md").read_text())[("concat", None, 25)][0] == \
        pytest.approx(81.0, abs=0.05)


@pytest.mark.usefixtures("one_thread")
def test_sweep_shots_all_writes_its_report_and_report_redraws_it(tiny_cache, tmp_path):
    from layerfuse.cli.sweep import main

    out = tmp_path / "sweep"
    args = ["--cache", str(tiny_cache), "--out", str(out), "--fusions", "base", "--shots", "all", "--epochs", "1",
            "--trials", "1", "--eval-points", "1", "--workers", "1", "--keep-heads", "none", "--quiet"]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, run.output
    assert "| base | all | 1 |" in (out / "report.md").read_text()
    assert (out / "f1_vs_step.png").is_file() and not (out / "f1_vs_shots.png").exists()
    report_text = (out / "report.md").read_text()
    assert "only indicative" in report_text and "f1_vs_shots.png" not in report_text  # no note on a missing plot
    (out / "report.md").unlink()
    again = CliRunner().invoke(main, ["--out", str(out), "--report", "--curve-shots", "all"])
    assert again.exit_code == 0, again.output
    assert (out / "report.md").is_file()


def test_a_diverged_run_is_named_in_the_report(figures, tmp_path):
    """A sweep run whose loss went nan scored like any other: the report averaged it in silence."""
    records = [_record("concat", 8, 25, seed, 0.5) for seed in range(3)]
    records[1]["evals"][1]["train_loss"] = float("nan")
    report.render(records, str(tmp_path))
    text = (tmp_path / "report.md").read_text()
    assert "1 run diverged (training or dev loss nan or inf): concat-8-25-1." in text
    records[1]["evals"][1]["train_loss"] = 0.3
    report.render(records, str(tmp_path))
    assert "diverged" not in (tmp_path / "report.md").read_text()


def test_a_learning_rate_whose_runs_diverged_is_never_chosen_as_best():
    """A cell's rate was the one of the best mean dev F1 even where its runs had diverged: the broken heads'
    F1s (any number; nan was taken as best or worst by chance) chose the rate the table and Figure 3 showed."""
    trained = [_record("concat", 8, 25, seed, 0.3) for seed in range(2)]
    lost = [_record("concat", 8, 25, seed, f1) for seed, f1 in ((0, 0.6), (1, float("nan")))]
    for r in lost:
        r["config"]["lr"] = 1e3
        r["evals"][1]["train_loss"] = float("nan")
    for runs in (trained + lost, lost[:1] + trained):
        assert report.best_lr(runs) == (1e-3, trained)
    assert report.best_lr(lost[:1])[0] == 1e3  # every rate diverged: it is still shown (and named below the table)


def test_a_report_reads_the_nulls_a_diverged_run_is_written_with(figures, tmp_path):
    """A record writes nan as null (valid JSON): the layer shares of a diverged head (nan) read back as None,
    on which the heat map's mean failed; the run must still read as diverged."""
    records = [_record("concat", 8, 25, seed, 0.5) for seed in range(2)]
    for r in records:
        r["evals"][1].update(train_loss=None, dev_loss=None)
        r["layer_usage"] = {"layers": [1, 2], "share": [None, None]}
    report.render(records, str(tmp_path))
    text = (tmp_path / "report.md").read_text()
    assert "2 runs diverged (training or dev loss nan or inf)" in text and "| concat | 8 | 25 |" in text
