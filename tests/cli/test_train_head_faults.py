"""`train-head` and `sweep` outputs checked before the work, and what an interrupted `train-head` says:
a `--out` that is a file or read-only is one line before any training (it once trained, then died in a
32-line SafetensorError or a terse "File exists"); a head that cannot be written at the end is saved
elsewhere and the line says where; Ctrl-C says the truth (the head is not resumed: it starts over)."""

from __future__ import annotations

import os

from click.testing import CliRunner

from layerfuse.cli.main import main


def _train_head(entry: str, out) -> list[str]:
    return ["train-head", "--cache", entry, "--fusion", "concat", "--shots", "2", "--epochs", "1", "--quiet",
            "--out", str(out)]


def test_ctrl_c_in_train_head_does_not_promise_a_resume(tiny_cache, tmp_path, monkeypatch):
    from layerfuse.training import loop

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "train_head", interrupted)
    out = CliRunner().invoke(main, _train_head(tiny_cache, tmp_path / "runs"))
    assert out.exit_code == 130
    assert "resume" not in out.output and "from the start" in out.output
    assert not os.path.exists(tmp_path / "runs") or os.listdir(tmp_path / "runs") == []
