"""A report is rewritten whole or not at all: on a full disk `sweep --report` wrote report.md and the
PNGs in place, so the last good report was lost, left cut mid-table (and the error named no file)."""

from __future__ import annotations

import errno
import json

import pytest

from layerfuse.experiments import report
from layerfuse.files import text_saved


def _records():
    return [{"config": {"fusion": f, "shots": n, "epochs": 5, "seed": s, "lr": 1e-3},
             "best_dev_f1": 0.5, "test_f1_at_best": 0.4, "model": "m", "dataset": "d",
             "evals": [{"step": 1, "dev_f1": 0.5}], "seconds": {"total": 1.0}}
            for f in ("base", "concat") for n in (2, 8) for s in range(2)]


def _full(path, *_, **__):
    with open(path, "wb") as f:
        f.write(b"cut")
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_keeps_the_last_report_whole(tmp_path, monkeypatch):
    report.render(_records(), str(tmp_path))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    from matplotlib.figure import Figure

    monkeypatch.setattr(Figure, "savefig", lambda fig, path, *a, **k: _full(path))
    with pytest.raises(OSError) as failed:
        report.render(_records(), str(tmp_path))
    assert failed.value.filename == str(tmp_path / "f1_vs_shots.png")  # the file meant, not its temporary twin
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_text_that_cannot_be_written_leaves_the_old_one(tmp_path, monkeypatch):
    target = tmp_path / "report.md"
    target.write_text("the last good report\n")

    def cut_open(path, mode="r", **kwargs):
        assert "w" in mode
        return _full(path)
    monkeypatch.setattr("layerfuse.files.open", cut_open, raising=False)
    with pytest.raises(OSError) as failed:
        text_saved(str(target), "a new report\n")
    assert failed.value.filename == str(target)
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"] and target.read_text() == "the last good report\n"


def test_a_probe_record_that_cannot_be_appended_names_its_file(tmp_path, monkeypatch):
    """A full disk met in the write of probe.jsonl said `No space left on device`, naming no file."""
    from layerfuse.probing import records

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")  # as write() raises it: no file name
    monkeypatch.setattr(records, "open", full, raising=False)
    with pytest.raises(OSError) as failed:
        records.append_record(str(tmp_path / "probe.jsonl"), {"seed": 0})
    assert failed.value.filename == str(tmp_path / "probe.jsonl")


def test_a_name_the_font_lacks_draws_without_a_warning_per_glyph(tmp_path):
    """A dataset named in CJK or with an emoji sent a `Glyph ... missing from font(s)` warning per glyph and
    figure to stderr (15 lines a sweep); the boxes drawn instead say as much."""
    import warnings

    records = [{**r, "dataset": "data 日本 🙂"} for r in _records()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report.render(records, str(tmp_path))
    assert not [w for w in caught if "missing from font" in str(w.message)]


def test_drawing_a_report_leaves_the_hosts_matplotlib_backend_alone(tmp_path):
    """Importing the report module switched the whole process to Agg (`matplotlib.use` at import), so a
    notebook's inline plots stopped showing; the probe report did the same when called."""
    import subprocess
    import sys

    script = ("import json, sys, matplotlib\n"
              "matplotlib.use('svg')\n"
              "from layerfuse.experiments import report\n"
              "from layerfuse.probing import report as probe_report\n"
              "report.render(json.loads(sys.argv[1]), sys.argv[2])\n"
              "print(matplotlib.get_backend())\n")
    import json

    out = subprocess.run([sys.executable, "-c", script, json.dumps(_records()), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "svg" and (tmp_path / "f1_vs_shots.png").is_file()


def test_a_link_or_a_device_named_as_the_output_is_written_not_replaced(tmp_path):
    """Written beside and renamed into place, `--out link.txt` replaced the link with a file (its target
    left as it was), `--out /dev/null` needed a file in /dev, and the file replaced lost its permissions."""
    import os

    target = tmp_path / "target.txt"
    target.write_text("old\n")
    os.chmod(target, 0o640)
    (tmp_path / "link.txt").symlink_to(target)
    text_saved(str(tmp_path / "link.txt"), "new\n")
    assert (tmp_path / "link.txt").is_symlink() and target.read_text() == "new\n"
    assert os.stat(target).st_mode & 0o777 == 0o640
    text_saved(os.devnull, "nothing\n")  # in place: /dev/null stays the device
    assert not os.path.isfile(os.devnull)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "target.txt"]
    from layerfuse.files import _is_stream, write_json

    write_json(str(tmp_path / "link.txt"), {"a": 1})  # a run record, a head's description: the same
    assert (tmp_path / "link.txt").is_symlink() and json.loads(target.read_text()) == {"a": 1}
    assert os.stat(target).st_mode & 0o777 == 0o640
    # /dev/stdout leads through /proc/self/fd/1 to what the shell sent it to: a log file a rename replaced
    (tmp_path / "out").symlink_to("/dev/stdout")
    os.mkfifo(tmp_path / "fifo")
    assert _is_stream(str(tmp_path / "out")) and _is_stream(str(tmp_path / "fifo"))
    assert not _is_stream(str(tmp_path / "link.txt")) and not _is_stream(str(tmp_path / "new.txt"))


def test_a_cell_with_an_overflowed_perplexity_reads_inf_not_inf_plus_minus_nan():
    """A perplexity read back as inf (its dev loss past exp's range) made the cell `inf ± nan (2)`, with
    numpy's "invalid value encountered in subtract" on stderr."""
    import math
    import warnings

    runs = [{"best_dev_ppl": 5.0}, {"best_dev_ppl": math.inf}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert report._f1(runs, "best_dev_ppl", scale=1.0) == "inf (2)"
    assert report._f1(runs[:1] * 2, "best_dev_ppl", scale=1.0) == "5.0 ± 0.0 (2)"
