"""Interrupted extraction: killed with SIGKILL after some units, the next run resumes and ends
bitwise identical to an uninterrupted run; the unfinished entry is never read as complete."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import kill_mid_extraction, slow_extract_child, split_arrays

from layerfuse.cache.reader import open_entry
from layerfuse.extract.run import ExtractConfig, extract

pytestmark = pytest.mark.slow  # starts extraction processes

# Runs extract in a child process whose writer pauses after each unit, so the test can kill it
# between units (and, with a short pause, while a unit is being written).
CHILD = slow_extract_child('')




@pytest.mark.parametrize("kill_after_units,pause", [(1, 2.0), (3, 2.0), (2, 0.2)])
def test_sigkill_then_resume_is_bitwise_identical(tiny_bert_dir, tiny_conll_dir, tmp_path, kill_after_units, pause):
    config = dict(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), unit_rows=256, splits=("train",))
    reference = extract(ExtractConfig(cache_dir=str(tmp_path / "ref"), **config), progress=False).path
    root = str(tmp_path / "killed")
    path = reference.replace(str(tmp_path / "ref"), root)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_bert_dir), str(tiny_conll_dir), root, str(pause)],
                             env=env)
    kill_mid_extraction(child, path, after_units=kill_after_units)
    resumed = extract(ExtractConfig(cache_dir=root, **config), progress=False, log=lambda m: None)
    assert resumed.path == path
    got, want = split_arrays(path), split_arrays(reference)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert open_entry(path).split("train").n_rows == 1116


def test_two_extracts_on_one_entry(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """Started together, one waits for the other; both end with the same complete entry."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_bert_dir), str(tiny_conll_dir),
                               str(tmp_path), "0.2"], env=env, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=180)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    ref = extract(ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path / "r"),
                                unit_rows=256, splits=("train",)), progress=False)
    path = ref.path.replace(str(tmp_path / "r"), str(tmp_path))
    for name, arr in split_arrays(ref.path).items():
        np.testing.assert_array_equal(split_arrays(path)[name], arr)


def test_extract_refuses_to_reuse_a_damaged_finished_split(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """A shard of a finished split deleted: `ls` and every reader said damaged, "re-extract", while `extract`
    said "already cached" and exit 0; an array's zarr.json gone was a 67-line KeyError."""
    from layerfuse.errors import LayerfuseError

    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path),
                           unit_rows=256)
    path = extract(config, progress=False, log=lambda m: None).path
    shard = os.path.join(path, "dev", "hidden", "c", "0", "0", "0")
    os.rename(shard, shard + ".aside")
    with pytest.raises(LayerfuseError, match=r"array dev/hidden, chunk c/0/0/0 is missing .*: extract would reuse "
                                             r"the damaged split; run `layerfuse verify` .*`layerfuse rm` the entry"):
        extract(config, progress=False, log=lambda m: None)
    os.rename(shard + ".aside", shard)
    os.rename(os.path.join(path, "test", "hidden", "zarr.json"), os.path.join(tmp_path, "zarr.json"))
    with pytest.raises(LayerfuseError, match=r"array test/hidden is missing \(no test/hidden/zarr.json\)"):
        extract(config, progress=False, log=lambda m: None)


def test_an_unfinished_split_whose_array_is_gone_is_written_again(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """An interrupted split whose hidden/zarr.json was removed: every rerun was a KeyError traceback."""
    import zarr

    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path),
                           unit_rows=256)
    path = extract(config, progress=False, log=lambda m: None).path
    before = split_arrays(path, "train")
    zarr.open_group(path, mode="r+")["train"].attrs["complete"] = False  # as a run stopped before its end
    os.remove(os.path.join(path, "train", "hidden", "zarr.json"))
    extract(config, progress=False, log=lambda m: None)
    after = split_arrays(path, "train")
    def label_sets(arrays: dict) -> list:  # written again, they take a new version: the same labels
        return [arrays.pop(k) for k in sorted(k for k in list(arrays) if k.startswith("labels."))]

    old_sets, new_sets = label_sets(before), label_sets(after)
    assert len(old_sets) == len(new_sets) == 2 and all(np.array_equal(a, b) for a, b in zip(old_sets, new_sets))
    assert set(after) == set(before) and all(np.array_equal(after[k], before[k]) for k in before)
    assert open_entry(path).with_labels("pos").split("train").labels.shape == before["labels"].shape


def test_a_shard_cut_short_after_its_unit_was_flagged_is_written_again(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """A crash whose flag reached the disk before the shard's bytes (no fsync between them): the resumed
    run trusted the flag, marked the split complete, and `ls` called the entry complete; reads then failed
    their checksums."""
    import zarr

    from layerfuse.cache.manage import quick_check

    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path),
                           unit_rows=256)
    path = extract(config, progress=False, log=lambda m: None).path
    before = split_arrays(path, "train")
    shard = os.path.join(path, "train", "hidden", "c", "1", "0", "0")
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) // 2)
    assert any("chunk c/1/0/0 is cut short" in p for p in quick_check(path))  # ls and extract name it
    zarr.open_group(path, mode="r+")["train"].attrs["complete"] = False  # as a run stopped before its end
    extract(config, progress=False, log=lambda m: None)
    after = split_arrays(path, "train")
    assert all(np.array_equal(after[k], before[k]) for k in before) and quick_check(path) == []


def test_a_split_with_units_no_process_wrote_is_never_complete(tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch):
    """Ranks writing to cache folders of their own (not one shared root): rank 0 marked each split complete with
    the other ranks' units missing, and a head trained on their rows read as zeros."""
    from layerfuse.cache.reader import open_entry
    from layerfuse.cache.writer import SplitWriter
    from layerfuse.errors import LayerfuseError

    write = SplitWriter.write_unit
    monkeypatch.setattr(SplitWriter, "write_unit",  # unit 1 is another process's, written elsewhere
                        lambda self, unit, rows, **kw: None if unit == 1 else write(self, unit, rows, **kw))
    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=str(tmp_path),
                           unit_rows=64, splits=("train",))
    with pytest.raises(LayerfuseError, match=r"unit\(s\) 1 were never written here; with several processes"):
        extract(config, progress=False, log=lambda m: None)
    monkeypatch.setattr(SplitWriter, "write_unit", write)
    path = extract(config, progress=False, log=lambda m: None).path  # the rerun writes it: complete
    assert "train" in open_entry(path).splits


def test_a_file_url_root_takes_new_entries(tiny_bert_dir, tiny_conll_dir, tmp_path):
    """`--cache-dir file:///...` read and reused entries, but creating one failed ("No such file or directory")."""
    from layerfuse.cache.reader import open_entry

    config = ExtractConfig(model=str(tiny_bert_dir), dataset=str(tiny_conll_dir), cache_dir=f"file://{tmp_path}",
                           unit_rows=256, splits=("train",))
    path = extract(config, progress=False, log=lambda m: None).path
    assert open_entry(path).split("train").n_sentences > 0
