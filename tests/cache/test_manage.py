"""`layerfuse ls | info | rm | verify`, and corruption detection by the crc32c checksums."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from click.testing import CliRunner

from layerfuse.cache.manage import latest_complete, list_entries, verify
from layerfuse.cache.reader import open_entry
from layerfuse.cli.main import main
from layerfuse.errors import LayerfuseError


def test_ls_info_rm(entry_copy):
    root = os.path.dirname(entry_copy)
    runner = CliRunner()
    out = runner.invoke(main, ["ls", "--cache-dir", root])
    assert out.exit_code == 0 and entry_copy in out.output and "train" in out.output
    info = runner.invoke(main, ["info", entry_copy])
    assert info.exit_code == 0 and "hidden [1116, 3, 32]" in info.output and "B-PER" in info.output
    assert [e.path for e in list_entries(root)] == [entry_copy]
    assert latest_complete(root).path == entry_copy
    rm = runner.invoke(main, ["rm", "--yes", entry_copy])
    assert rm.exit_code == 0 and not os.path.exists(entry_copy)
    assert runner.invoke(main, ["ls", "--cache-dir", root]).output.startswith("no entries")


def test_ls_lists_an_entry_finished_in_the_future_last_and_says_so(entry_copy):
    """An entry whose splits were stamped finished by a clock ahead of this one (or copied, times kept, from
    such a machine) was listed first, as the newest, however old it was."""
    import shutil

    import zarr

    root = os.path.dirname(entry_copy)
    ahead = os.path.join(root, f"m__d__{'6' * 16}")
    shutil.copytree(entry_copy, ahead)
    for split in ("train", "dev", "test"):
        zarr.open_group(ahead, mode="a")[split].attrs["finished"] = "2030-01-01T00:00:00+0000"
    assert [e.path for e in list_entries(root)] == [entry_copy, ahead]
    out = CliRunner().invoke(main, ["ls", "--cache-dir", root])
    assert out.exit_code == 0 and out.output.index(entry_copy) < out.output.index(ahead), out.output
    assert "2030-01-01T00:00:00+0000 (later than this machine's clock: listed as unknown)" in out.output


def _private(monkeypatch, entry: str) -> None:
    """``entry`` as a colleague's private folder looks to this user: nothing in it can be looked at or read
    (tests may run as root)."""
    from layerfuse.cache import manage

    real_stat, real_status = os.stat, manage.entry_status

    def stat(path, *args, **kw):
        if str(path).startswith(entry + os.sep):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kw)

    def status(path, **kw):
        if path == entry:
            raise PermissionError(13, "Permission denied", os.path.join(entry, "zarr.json"))
        return real_status(path, **kw)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(manage, "entry_status", status)


def test_ls_names_an_entry_this_user_may_not_read(entry_copy, monkeypatch):
    """`ls` passed over an entry the user could not look into (os.path.isfile said no on "Permission
    denied"): listed neither as an entry nor as unreadable, as if it were not there."""
    import shutil

    root = os.path.dirname(entry_copy)
    private = os.path.join(root, f"m__d__{'1' * 16}")
    shutil.copytree(entry_copy, private)
    _private(monkeypatch, private)
    out = CliRunner().invoke(main, ["ls", "--cache-dir", root])
    assert out.exit_code == 1 and entry_copy in out.output, out.output
    said = f"error: {private}: unreadable by this user (permission denied: {private}/zarr.json)"
    assert said in out.output.splitlines(), out.output


def test_info_on_a_non_entry_is_one_line_error(tmp_path):
    out = CliRunner().invoke(main, ["info", str(tmp_path / "nothing")])
    assert out.exit_code == 1 and out.output.strip().count("\n") == 0 and "no cache entry" in out.output


def test_verify_clean_entry(entry_copy):
    assert verify(entry_copy) == []
    out = CliRunner().invoke(main, ["verify", entry_copy])
    assert out.exit_code == 0 and out.output.startswith("ok")


def test_flipped_byte_is_caught_by_verify_and_by_reads(entry_copy):
    shard = sorted(glob.glob(f"{entry_copy}/train/hidden/c/*/0/0"))[1]  # the second shard
    data = bytearray(open(shard, "rb").read())
    data[100] ^= 0x01  # inside the first inner chunk (layer 0) of that shard
    open(shard, "wb").write(data)
    problems = verify(entry_copy)
    assert len(problems) == 1 and "train/hidden" in problems[0] and "chunk (1, 0, 0)" in problems[0]
    out = CliRunner().invoke(main, ["verify", entry_copy])
    assert out.exit_code == 1 and "train/hidden" in out.output
    split = open_entry(entry_copy).split("train")
    split.hidden(layers=[1])  # other layers' chunks are intact and still read
    with pytest.raises(LayerfuseError, match=r"train/hidden.*checksum"):
        split.hidden(layers=[0])


def test_incomplete_split_is_not_listed_as_complete(entry_copy):
    import zarr

    zarr.open_group(entry_copy, mode="a")["dev"].attrs["complete"] = False
    root = os.path.dirname(entry_copy)
    assert latest_complete(root) is None
    assert open_entry(entry_copy).splits == ["train", "test"]
    with pytest.raises(LayerfuseError, match="incomplete"):
        open_entry(entry_copy).split("dev")
    np.testing.assert_equal(open_entry(entry_copy).split("train").n_sentences, 122)


def test_a_variant_is_never_told_apart_by_nothing():
    """`info` printed `variant PATH ()` for an entry whose storage options equal this one's."""
    from layerfuse.cli.cache import how_it_differs

    same = {"model": "m", "dtype": "float16", "precision": "fp32"}
    assert how_it_differs(same, {**same, "dtype": "int8"}) == "dtype int8"
    assert how_it_differs(same, {**same, "mask_seed": 1}) == "mask_seed 1"
    assert how_it_differs(same, dict(same)) == "the same settings, made apart"


def test_mlm_entries_are_told_apart_by_their_masking():
    """Two MLM entries masked with other seeds listed as the same `[subword float16 fp32-forward max 512]`."""
    from layerfuse.cache.manage import options_label

    fields = {"granularity": "subword", "pooling": "none", "dtype": "float16", "precision": "fp32",
              "max_length": 512, "block_size": 128, "mlm_probability": 0.15}
    assert options_label({**fields, "mask_seed": 0}) != options_label({**fields, "mask_seed": 1})
    assert options_label({**fields, "mask_seed": 1}).endswith("block-size 128 mlm-probability 0.15 mask-seed 1")
    assert "mask" not in options_label({"granularity": "word", "pooling": "first"})  # NER entries as before


@pytest.mark.parametrize("call, said", [
    (lambda s: s.hidden(sentences=[0.7, 1.2], layers=[1]), "sentences must be integer ids, got float64"),
    (lambda s: s.hidden(sentences=np.array([True, False]), layers=[1]), "sentences must be integer ids, got bool"),
    (lambda s: s.hidden(sentences=[0], layers="12"), "layers must be a sequence of integer ids, got '12'"),
    (lambda s: s.hidden(sentences=[0], layers=2), "layers must be a sequence of integer ids, got 2"),
    (lambda s: s.stored(sentences=[0], layers=[-1]), r"layers \[-1\] out of range"),
    (lambda s: s.words([-1]), "sentence ids out of range"),
])
def test_readers_take_integer_ids_in_range_only(tiny_cache, call, said):
    """Floats were truncated, a bool mask read as ids, a string's digits as layers; stored() read -1 as the
    last layer and words() an id past the split as nothing."""
    with pytest.raises(LayerfuseError, match=said):
        call(open_entry(tiny_cache).split("train"))


def test_a_stray_file_beside_the_splits_prints_no_zarr_warning(entry_copy):
    """A ``.DS_Store`` (an entry copied from a Mac) or zarr's ``zarr.<hex>.partial`` (an extract writing)
    beside the splits made `ls`, `info`, `gc` and every read print zarr's two-line UserWarning."""
    import warnings

    open(os.path.join(entry_copy, ".DS_Store"), "wb").close()
    root = os.path.dirname(entry_copy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc = ["gc", "--max-size", "1T", "--cache-dir", root]
        for args in (["ls", "--cache-dir", root], ["info", entry_copy], gc):
            result = CliRunner().invoke(main, args)
            assert result.exit_code == 0, (args, result.output)
        open_entry(entry_copy).split("train")
    assert not [w for w in caught if "not recognized" in str(w.message)]


def test_rm_with_no_answer_to_read_names_yes_and_keeps_the_entry(entry_copy):
    """A batch job's stdin at its end gave a bare "Aborted!", closed a 30-line traceback; neither named --yes."""
    said = CliRunner().invoke(main, ["rm", entry_copy], input="")
    assert said.exit_code == 1 and said.output.splitlines()[-1] == (
        "error: not deleted: no answer was read (stdin ended or is closed, as in a batch job); pass --yes to delete "
        "without asking")
    assert os.path.isdir(entry_copy)
    assert CliRunner().invoke(main, ["rm", entry_copy], input="y\n").exit_code == 0  # an answer piped in
    assert not os.path.exists(entry_copy)


def test_ctrl_c_at_the_rm_question_on_a_terminal_is_clicks_aborted(monkeypatch):
    """At a terminal, Ctrl-C at the question is "Aborted!" as ever, not the batch job's line about --yes."""
    import click
    import pytest

    from layerfuse.cli import cache

    def interrupted(*a, **k):
        raise click.Abort()

    class Terminal:
        def isatty(self):
            return True

    monkeypatch.setattr(click, "confirm", interrupted)
    monkeypatch.setattr("sys.stdin", Terminal())
    with pytest.raises(click.Abort):
        cache._confirmed("delete it?")
