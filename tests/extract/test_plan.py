"""An extraction killed between splits: the entry records the splits it was asked for before
writing any, so it stays incomplete (in `ls`, `info`, `verify`, the resolver and the API) until a
rerun finishes the missing ones."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from layerfuse.cache.manage import entry_status, latest_complete, verify
from layerfuse.cli.main import main
from layerfuse.errors import IncompleteEntryError, LayerfuseError
from layerfuse.experiments.find import resolve_entry

# Extract every split of argv[2] with model argv[1] into root argv[3]; SIGKILL itself the moment
# split `dev` is marked complete, before `test` starts.
KILLED_AFTER_DEV = textwrap.dedent(
    """
    import os, signal, sys
    from layerfuse.cache import writer
    finish = writer.SplitWriter.finish
    def finish_then_die(self, stats):
        finish(self, stats)
        if self.group.basename == "dev":
            os.kill(os.getpid(), signal.SIGKILL)
    writer.SplitWriter.finish = finish_then_die
    from layerfuse.extract.run import ExtractConfig, extract
    extract(ExtractConfig(model=sys.argv[1], dataset=sys.argv[2], cache_dir=sys.argv[3], unit_rows=256),
            progress=False)
    """
)


@pytest.fixture
def killed_between_splits(tiny_bert_dir, tiny_conll_dir, tmp_path):
    root = tmp_path / "root"
    child = subprocess.run([sys.executable, "-c", KILLED_AFTER_DEV, str(tiny_bert_dir), str(tiny_conll_dir), str(root)],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == -9, child.stderr  # killed, as planned
    (path,) = [str(p) for p in root.iterdir() if p.is_dir()]
    return str(root), path


def test_an_extraction_killed_between_splits_is_incomplete_until_rerun(killed_between_splits, tiny_bert_dir,
                                                                        tiny_conll_dir):
    root, path = killed_between_splits
    status = entry_status(path)
    assert not status.complete and status.missing == ["test"]
    assert latest_complete(root) is None
    ls = CliRunner().invoke(main, ["ls", "--cache-dir", root])
    assert ls.exit_code == 0 and "incomplete: test not finished" in ls.output
    info = CliRunner().invoke(main, ["info", path])
    assert info.exit_code == 0 and "test  MISSING" in info.output
    assert verify(path) == [f"{path}: split test was asked for and is not finished (rerun `extract` to finish it)"]
    with pytest.raises(IncompleteEntryError, match="split.s. test were asked for"):
        resolve_entry(cache=path)
    with pytest.raises(LayerfuseError, match="no complete ner cache entry .*; rerun the `extract` that made .* to "
                                             "finish it"):  # not "run extract first": it was run
        resolve_entry(cache_dir=root)
    # The resolver of --model/--dataset finishes it: only test is extracted, train and dev are reused.
    logged = []
    entry = resolve_entry(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=root,
                          extract_options={"unit_rows": 256}, log=logged.append, progress=False)
    assert entry.path == path and entry.splits == ["train", "dev", "test"] and entry.missing_splits == []
    assert any("test not finished" in line for line in logged)
    assert entry_status(path).complete and verify(path) == []
