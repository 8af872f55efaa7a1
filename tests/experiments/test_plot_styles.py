"""One style table for every plot (`layerfuse.experiments.plots.HEAD_STYLES`, from the fusions'
declarations): the DWAtt paper's colours (Concat orange, DWAtt blue), labels that say what a curve
is, bands that say they are 95% CIs; and the figures scripts/ draw for the paper page take their
styles from it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from matplotlib.colors import to_rgba

from layerfuse.experiments.plots import BAND_LABEL, HEAD_STYLES, head_label, head_style, legend_handles

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def _script(name: str):
    """scripts/<name>.py as a module (scripts/ on sys.path, as `python scripts/NAME.py` puts it)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(f"_script_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_papers_colours():
    assert to_rgba(head_style("concat")["color"]) == to_rgba("tab:orange")
    assert to_rgba(head_style("dwatt")["color"]) == to_rgba("tab:blue")


def test_every_entry_is_colour_marker_label_and_distinct_heads_look_distinct():
    same_head = {"dwatt (scaled)": "dwatt", "dwatt (paper score)": "dwatt (paper)"}  # two names of one head
    looks = {}
    for name, (color, marker, label) in HEAD_STYLES.items():
        assert marker and label
        look = (to_rgba(color), marker)
        if name in same_head:
            assert look == looks.get(same_head[name], look)
            continue
        assert look not in looks.values(), f"{name} looks like another head"
        looks[name] = look


def test_labels_say_what_a_curve_is():
    # "dwatt (paper)" would read as the paper's result; it is DWAtt with the paper's score, at our rate
    for name in ("dwatt (paper)", "dwatt (paper score)"):
        assert head_label(name) == "dwatt, paper's score"
    assert not any(label.endswith("(paper)") for _, _, label in HEAD_STYLES.values())
    assert head_label("a head not in the table") == "a head not in the table"


def test_the_table_is_the_fusions_declarations():
    """Each fusion declares its look (`Fusion.style`) and its settings' values theirs (`Option.styles`);
    plots.py spells no fusion, no setting and no value of one."""
    from layerfuse.fusions.registry import FUSIONS

    source = (ROOT / "layerfuse/experiments/plots.py").read_text(encoding="utf-8")
    for name, cls in FUSIONS.items():
        assert HEAD_STYLES[name][:2] == (cls.style.colour, cls.style.marker)
        assert f'"{name}' not in source
        for option in cls.options:
            assert option.name not in source
            for value, style in option.styles:
                assert HEAD_STYLES[f"{name} ({value})"][:2] == (style.colour or cls.style.colour,
                                                                style.marker or cls.style.marker)
                assert f'"{value}' not in source
    # a value spelt with its setting's last word names the same head ("dwatt (paper score)", as scripts/ say)
    assert head_style("dwatt (paper score)") == head_style("dwatt (paper)")
    assert head_label("dwatt (paper score)") == head_label("dwatt (paper)")


def test_variants_keep_their_fusions_colour_and_differ_in_line():
    """Labelled variants took a hashed spare colour: "concat (precision fp32)" and "dwatt (precision bf16)"
    were one colour, neither their fusion's."""
    a, b = head_style("concat (precision fp32)"), head_style("dwatt (precision bf16)")
    assert a["color"] == head_style("concat")["color"] and b["color"] == head_style("dwatt")["color"]
    assert a["linestyle"] != "-" and (a["marker"], a["linestyle"]) != (head_style("concat (precision bf16)")["marker"],
                                                                     head_style("concat (precision bf16)")["linestyle"])


def test_the_band_says_it_is_a_95_percent_ci():
    assert BAND_LABEL == "95% CI"
    handles, labels = legend_handles(["dwatt", "concat"], band=f"{BAND_LABEL} over 5 seeds")
    assert labels == ["concat", "dwatt", "95% CI over 5 seeds"]
    assert handles[-1].get_label() == "95% CI over 5 seeds"
    assert [h.get_color() for h in handles[:2]] == [head_style("concat")["color"], head_style("dwatt")["color"]]


@pytest.fixture
def kept(monkeypatch):
    """Figures drawn by the scripts, kept open: {file name: figure}."""
    figures = {}
    from matplotlib.figure import Figure

    real = Figure.savefig

    def savefig(fig, path, *args, **kwargs):
        figures[Path(path).name] = fig
        return real(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figures


def test_figure_4_at_the_papers_setting(kept, tmp_path):
    """Drawn from the committed per-epoch records: every epoch, both panels on one y-range from 0,
    the heads in the table's colours, the bands labelled as 95% CIs."""
    fig4 = _script("figure4_conll")
    text = fig4.main(["--plot", str(tmp_path / "f4.png"), "--table", str(tmp_path / "f4.md")])
    assert "| 8 | dwatt − concat |" in text and "| 128 | dwatt − concat |" in text
    fig = kept["f4.png"]
    panels = [ax for ax in fig.axes if ax.get_title().startswith("N = ")]
    assert [ax.get_title().split(" (")[0] for ax in panels] == ["N = 8", "N = 128"]
    assert {ax.get_ylim() for ax in panels} == {panels[0].get_ylim()} and panels[0].get_ylim()[0] == 0
    assert "3,250 sentences" in panels[0].get_ylabel()
    for ax in panels:
        for line in ax.get_lines():
            if line.get_label().startswith("_"):
                continue
            assert len(line.get_xdata()) == 50  # every epoch
            assert to_rgba(line.get_color()) == to_rgba(head_style(line.get_label())["color"])
    legend = [t.get_text() for t in panels[-1].get_legend().get_texts()]
    assert "95% CI over 5 seeds" in legend
    assert any(t.startswith("concat") for t in legend) and not any("(paper)" in t for t in legend)


def test_figure_7_redrawn_from_the_committed_files(kept, tmp_path):
    """The depth study's figures from its committed table and the probe's nu records: every head of
    the table in its style-table colour, one y-range for all panels, the error bars labelled as 95%
    CIs, and nu drawn for layers 1..L only (auto:K never picks the embedding output)."""
    depth = _script("depth_study_conll")
    table = tmp_path / "depth.md"
    table.write_text((ROOT / "docs/results/depth_study_conll.md").read_text(encoding="utf-8"), encoding="utf-8")
    stats = depth.gains_from_table(table.read_text(encoding="utf-8"))
    assert len(stats) == 28  # 2 backbones x (4 heads + 3 under the paper's protocol) x 2 N; Base has no gain
    assert stats["all-MiniLM-L6-v2", "layerfuse", "concat", 128] == (14.4, 3.7, 3)
    depth.main(["--redraw", "--table", str(table), "--nu-from", str(ROOT / "docs/results/probe_conll")])
    gains = kept["depth_gains_over_base.png"]
    panels = [ax for ax in gains.axes if ax.get_title()]
    assert len(panels) == 4 and len({ax.get_ylim() for ax in panels}) == 1
    assert any("95% CI" in t.get_text() for legend in gains.legends for t in legend.get_texts())
    for ax in panels:
        for bar in ax.patches:
            assert to_rgba(bar.get_facecolor())[:3] in {to_rgba(HEAD_STYLES[h][0])[:3] for h in HEAD_STYLES}
    nu = kept["depth_nu_by_relative_depth.png"]
    xs = [x for line in nu.axes[0].get_lines() for x in line.get_xdata()]
    assert min(xs) > 0 and max(xs) == 1
    labels = [t.get_text() for t in nu.axes[0].get_yticklabels() if t.get_text()]
    assert len(labels) >= 4 and all("10^" not in t and "times" not in t for t in labels)


def test_spare_looks_differ_from_each_other_and_from_every_fusions():
    """A head no fusion declares takes a colour and a shape by a hash of its name: two of the eight
    colours were one (C9 is #17becf), so different rows of a report were drawn alike."""
    from matplotlib.colors import to_hex

    from layerfuse.experiments import plots
    from layerfuse.fusions import FUSIONS

    spare = [to_hex(c) for c in plots._SPARE_COLOURS]
    declared = {to_hex(cls.style.colour) for cls in FUSIONS.values() if cls.style.colour}
    assert len(set(spare)) == len(spare) and not set(spare) & declared
    shapes = {cls.style.marker for cls in FUSIONS.values() if cls.style.marker}
    assert len(set(plots._SPARE_MARKERS)) == len(plots._SPARE_MARKERS) and not set(plots._SPARE_MARKERS) & shapes
