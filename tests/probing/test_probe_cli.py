"""`layerfuse probe` end to end on the tiny cache: records, the report, the figure, the errors."""

from __future__ import annotations

import re

import pytest
from cli_output import one_usage_error
from click.testing import CliRunner

from layerfuse.cli.main import main
from layerfuse.errors import LayerfuseError
from layerfuse.probing.records import FILENAME, read_records

pytestmark = pytest.mark.usefixtures("one_thread")
FAST = ["--epochs", "1", "--min-steps", "20"]


def test_probe_writes_records_report_and_figure(tiny_cache, tmp_path):
    out = tmp_path / "probe"
    args = ["probe", "--cache", tiny_cache, "--labels", "ner", "--trials", "2", "--out", str(out), "--quiet", *FAST]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    records = read_records(str(out / FILENAME))
    assert len(records) == 2 * 4 * 2  # seeds x (layers 0..2 + mix) x (task, control)
    assert {r["seed"] for r in records} == {0, 1} and {r["label_set"] for r in records} == {"ner"}

    md = (out / "probe.md").read_text()
    assert "## ner (span; means over seeds 0, 1)" in md
    rows = re.findall(r"^\| (\d+|mix) \|", md, re.MULTILINE)
    assert rows == ["0", "1", "2", "mix"]
    assert "center of gravity" in md and "ScalarMix weights" in md
    png = (out / "probe.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert "| layer | f1 (dev) |" in result.output and f"wrote {out / FILENAME}" in result.output

    again = CliRunner().invoke(main, args)  # everything is there: nothing is trained, the same report
    assert again.exit_code == 0, again.output
    assert len(read_records(str(out / FILENAME))) == len(records)


def test_probe_defaults_to_every_label_set(tiny_cache, tmp_path):
    from layerfuse.cache.reader import open_entry
    from layerfuse.probing.data import label_sets

    sets = list(label_sets(open_entry(tiny_cache)))
    result = CliRunner().invoke(main, ["probe", "--cache", tiny_cache, "--out", str(tmp_path), "--quiet",
                                       "--no-control", *FAST])
    assert result.exit_code == 0, result.output
    records = read_records(str(tmp_path / FILENAME))
    assert [r["label_set"] for r in records[::4]] == sets and not any(r["control"] for r in records)
    ner_rows = [line for line in (tmp_path / "probe.md").read_text().split("\n## ")[1].split("\n")
                if re.match(r"\| (\d|mix)", line)]
    assert len(ner_rows) == 4
    assert all(row.split(" | ")[3:5] == ["-", "-"] for row in ner_rows)  # no control acc, no selectivity


@pytest.mark.parametrize("args, message", [
    (["--labels", "ner,nope"], "nope not in"),
    (["--seeds", "0,1", "--trials", "2"], "give one"),
    (["--seeds", "0,x"], "'x' is not a seed in 0..4294967295"),
    (["--seeds", "0,-1"], "'-1' is not a seed in 0..4294967295"),  # numpy's traceback before
    (["--shots", "0"], "--shots '0' must be >= 1"),
    (["--lr", "inf"], "ProbeConfig.lr = inf must be a finite number > 0"),  # a 46-line traceback before
])
def test_bad_options_are_one_line_errors(tiny_cache, tmp_path, args, message):
    result = CliRunner().invoke(main, ["probe", "--cache", tiny_cache, "--out", str(tmp_path), "--quiet", *args])
    assert message in one_usage_error(result)  # a wrong call: exit 2


def test_a_diverged_probe_is_one_line_error(tiny_cache, tmp_path):
    result = CliRunner().invoke(main, ["probe", "--cache", tiny_cache, "--out", str(tmp_path), "--quiet",
                                       "--lr", "1e30", "--min-steps", "50", "--no-control"])
    assert result.exit_code == 1  # a failure of the run, not of the call
    lines = [line for line in result.output.splitlines() if not line.startswith("probing ")]  # what it runs
    assert "a probe diverged (its weights are not finite) at learning rate 1e+30: lower --lr" in result.output
    assert len(lines) == 1, result.output


def test_an_entry_past_float16_range_is_probed(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """A float32 (or bfloat16, int8) entry holding values past 65504, what `extract` advises for such a model:
    the probe stopped at the mix ("holds its layers in float16"), every per-layer probe lost with it."""
    from conftest import scaled_bert

    from layerfuse.extract.run import ExtractConfig, extract

    loud = scaled_bert(tiny_bert_dir, tmp_path / "loud", lambda layer: layer.output.LayerNorm.weight.fill_(1e5))
    entry = extract(ExtractConfig(model=str(loud), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path / "root"),
                                  dtype="float32", unit_rows=256), progress=False, log=lambda m: None).path
    out = tmp_path / "probe"
    result = CliRunner().invoke(main, ["probe", "--cache", entry, "--labels", "ner", "--trials", "1", "--out",
                                       str(out), "--quiet", *FAST])
    assert result.exit_code == 0, result.output
    assert {r["probe"] for r in read_records(str(out / FILENAME))} == {0, 1, 2, "mix"}


@pytest.mark.parametrize("line", ["{}", "[1, 2]", '{"cache": {}}'])
def test_a_line_that_is_json_but_no_probe_record_is_named_in_one_line(tmp_path, line):
    """A probe.jsonl line of other JSON (another file's, an edit) was a 39-line KeyError at the rerun."""
    path = tmp_path / FILENAME
    path.write_text(line + "\n")
    with pytest.raises(LayerfuseError, match=rf"{FILENAME}, line 1: not a probe record"):
        read_records(str(path))
