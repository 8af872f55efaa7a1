"""A head keeps one colour and one marker in every panel and every figure of a report, whichever heads
a panel holds: a head missing from a panel must not shift the colours of the heads after it (the
committed Figure 3 once drew the extra layers in the colour its legend gave to DWAtt's paper score)."""

from __future__ import annotations

import pytest
from conftest import kept_figures
from matplotlib.colors import to_rgba

from layerfuse.experiments import report
from layerfuse.experiments.plots import HEAD_STYLES, head_label, head_style


def _record(fusion, shots, epochs, seed, *, layer_score="scaled", f1=0.5):
    return {"config": {"fusion": fusion, "shots": shots, "epochs": epochs, "seed": seed, "lr": 1e-3,
                       "layer_score": layer_score, "dev_sentences": None},
            "best_dev_f1": f1 + 0.01 * seed, "test_f1_at_best": f1, "model": "m", "dataset": "d",
            "evals": [{"step": s, "dev_f1": f1 + 0.001 * s} for s in (1, 2, 3)], "seconds": {"total": 1.0}}


def _records():
    """concat, dwatt, extra at caps 25 and 50; DWAtt's paper score at cap 25 only (sorted before
    extra, so a palette drawn in order would shift extra's colour at cap 50); base at N = 8 only."""
    out = []
    for seed in range(2):
        for n in (8, 32):
            for epochs in (25, 50):
                for i, fusion in enumerate(("concat", "dwatt", "extra")):
                    out.append(_record(fusion, n, epochs, seed, f1=0.3 + 0.1 * i))
            out.append(_record("dwatt", n, 25, seed, layer_score="paper", f1=0.2))
        out.append(_record("base", 8, 50, seed, f1=0.1))
    return out


@pytest.fixture
def figures(monkeypatch, tmp_path):
    """Every figure `render` draws, kept open: {file name: figure}."""
    kept = kept_figures(monkeypatch)
    report.render(_records(), str(tmp_path), curve_shots=[8, 32])
    return kept


def _style(artist) -> tuple:
    return to_rgba(artist.get_color()), artist.get_marker()


def _legend(fig) -> dict[str, tuple]:
    """{legend label: style} of the heads' entries (the band's entry, a patch, left out)."""
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 1
    handles = getattr(legends[0], "legend_handles", None) or legends[0].legendHandles
    return {text.get_text(): _style(h) for text, h in zip(legends[0].get_texts(), handles) if hasattr(h, "get_marker")}


def _lines(fig) -> list[tuple[str, str, tuple]]:
    """(panel title, head, style) of every labelled line."""
    return [(ax.get_title(), line.get_label(), _style(line))
            for ax in fig.axes for line in ax.get_lines() if not line.get_label().startswith("_")]


def test_every_line_has_its_legend_colour_in_every_panel(figures):
    shots = figures["f1_vs_shots.png"]
    legend = _legend(shots)
    assert sorted(legend) == sorted(map(head_label, ["base", "concat", "dwatt", "dwatt (paper)", "extra"]))
    assert "dwatt (paper)" not in legend  # it is the paper's score at this project's rate, not the paper's result
    lines = _lines(shots)
    heads_by_panel = {title: {head for t, head, _ in lines if t == title} for title, _, _ in lines}
    assert heads_by_panel["25 epochs"] == {"concat", "dwatt", "dwatt (paper)", "extra"}
    assert heads_by_panel["50 epochs"] == {"base", "concat", "dwatt", "extra"}  # no dwatt (paper) here
    for title, head, style in lines:
        want = legend[head_label(head)]
        assert style == want, f"{head} in panel {title!r}: {style} against the legend's {want}"
    assert len({s for s in legend.values()}) == len(legend), "two heads share a style"


def test_a_head_looks_the_same_in_every_figure_of_the_report(figures):
    seen: dict[str, set] = {}
    for name in ("f1_vs_shots.png", "f1_vs_step.png"):
        legend = _legend(figures[name])
        for _, head, style in _lines(figures[name]):
            assert style == legend[head_label(head)], f"{name}: {head}"
            seen.setdefault(head, set()).add(style)
    assert all(len(styles) == 1 for styles in seen.values()), seen
    assert seen["extra"] == {(to_rgba(HEAD_STYLES["extra"][0]), HEAD_STYLES["extra"][1])}


def test_unknown_heads_get_a_style_fixed_by_their_name():
    assert head_style("some new head") == head_style("some new head")
    assert head_style("dwatt (scaled)") == head_style("dwatt")
    assert head_style("concat") != head_style("dwatt")


def test_figure_3_redrawn_from_the_committed_table(figures, tmp_path):
    """`stats_from_table` reads back the numbers the table shows, the ones Figure 3 plots."""
    records = _records()
    parsed = report.stats_from_table((tmp_path / "report.md").read_text())
    stats = report.shots_stats(records)
    assert set(parsed) == set(stats)
    for key, (mean, half) in stats.items():
        assert parsed[key] == pytest.approx((mean, half), abs=0.051)
    # the "(n)" too: a redrawn figure drew bands for cells of too few trials, which the live one leaves out
    assert report.trials_from_table((tmp_path / "report.md").read_text()) == report.shots_trials(records)
    report.draw_f1_vs_shots(parsed, str(tmp_path / "again.png"))
    redrawn = figures["again.png"]
    legend = _legend(redrawn)
    for _title, head, style in _lines(redrawn):
        assert style == legend[head_label(head)] == _legend(figures["f1_vs_shots.png"])[head_label(head)]
