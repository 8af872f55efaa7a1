"""`layerfuse gc`: the least recently used complete entries go first, until the root fits; never
one being written, open in a reader, or partial; --dry-run removes nothing; sizes parse or fail in
one line."""

from __future__ import annotations

import os
import shutil
import time

import pytest
import zarr
from cli_output import one_usage_error
from click.testing import CliRunner

from layerfuse.cache import usage
from layerfuse.cache.gc import collect, parse_size
from layerfuse.cache.layout import FINISHED_FORMAT
from layerfuse.cache.lock import EntryLock
from layerfuse.cache.manage import bytes_on_disk, finished_seconds
from layerfuse.cache.reader import open_entry
from layerfuse.cli.main import main
from layerfuse.errors import LayerfuseError

HOUR = 3600.0


@pytest.fixture
def root(tmp_path):
    return tmp_path / "root"


@pytest.fixture
def make_entry(tiny_cache, root):
    """``make_entry("a")``: a copy of the tiny entry under the root, named ``a``."""
    def make(name: str) -> str:
        dst = root / name
        shutil.copytree(tiny_cache, dst)
        return str(dst)

    return make


def read_at(path: str, when: float, monkeypatch) -> None:
    """Record a read of ``path`` as if made at ``when``."""
    with monkeypatch.context() as m:
        m.setattr(usage.time, "time", lambda: when)
        usage.mark_read(path)  # stamped with the clock's time: the file's owner alone may set another
    os.utime(path + ".read", (when, when))
    assert usage.last_read(path) == pytest.approx(when, abs=1)


def finished_at(path: str, stamp: str) -> None:
    for split in ("train", "dev", "test"):
        zarr.open_group(path, mode="a")[split].attrs["finished"] = stamp


def names(entries) -> list[str]:
    return [os.path.basename(e.path) for e in entries]


def dirs(root) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def test_keeps_the_most_recently_used(make_entry, root, monkeypatch):
    now = time.time()
    old, older, recent, stale, unread = (make_entry(n) for n in ("old", "older", "recent", "stale", "unread"))
    for path in (old, older, recent, stale):
        finished_at(path, "2020-01-02T03:04:05+0000")
    read_at(old, now - 2 * HOUR, monkeypatch)
    read_at(older, now - 3 * HOUR, monkeypatch)
    read_at(recent, now - 1 * HOUR, monkeypatch)
    # `stale` was never read: its finish time counts, and goes first; `unread` was never read either
    # but finished minutes ago (the fixture's extract): newer than every read
    size = bytes_on_disk(old)
    half = size // 2  # the limits fall between two sizes: entries differ by a few bytes of metadata
    removed = collect(str(root), max_size=bytes_on_disk(str(root)) - 2 * size + half)
    assert names(removed) == ["stale", "older"]
    assert dirs(root) == ["old", "recent", "unread"]

    assert collect(str(root), max_size=bytes_on_disk(str(root))) == []  # fits already: nothing goes
    assert names(collect(str(root), max_size=size + half)) == ["old", "recent"]
    assert dirs(root) == ["unread"]


def test_never_removes_an_entry_in_use_or_partial(make_entry, root, monkeypatch):
    now = time.time()
    held, writing, partial, idle = (make_entry(n) for n in ("held", "writing", "partial", "idle"))
    for path in (held, writing, partial, idle):
        finished_at(path, "2020-01-02T03:04:05+0000")
    read_at(held, now - 3 * HOUR, monkeypatch)  # read long ago, and open still: the open counts, not the read
    zarr.open_group(partial, mode="a")["dev"].attrs["complete"] = False
    skipped = []
    with open_entry(held), EntryLock(writing, log=lambda m: None):
        assert usage.in_use(writing) and usage.in_use(held) and not usage.in_use(idle)
        removed = collect(str(root), max_size=0, on_skip=lambda e, why: skipped.append((names([e])[0], why)))
    assert names(removed) == ["idle"]  # the root stays over the size rather than lose one of the others
    assert all(os.path.isdir(p) for p in (held, writing, partial))
    assert sorted(skipped) == [("held", f"open by a reader (process {os.getpid()})"),
                               ("writing", "being written by an extract")]
    assert sorted(names(collect(str(root), max_size=0))) == ["held", "writing"]  # closed and written: they go


def test_dry_run_removes_nothing_and_lists_what_would_go(make_entry, root):
    for name in ("a", "b"):
        make_entry(name)
    finished_at(str(root / "a"), "2020-01-02T03:04:05+0000")
    limit = bytes_on_disk(str(root)) - 1
    runner = CliRunner()
    dry = runner.invoke(main, ["gc", "--max-size", str(limit), "--dry-run", "--cache-dir", str(root)])
    assert dry.exit_code == 0, dry.output
    assert f"would remove {root / 'a'} (" in dry.output and "1 entry would be removed" in dry.output
    assert str(root / "b") not in dry.output
    assert sorted(os.listdir(root)) == ["a", "b"]

    real = runner.invoke(main, ["gc", "--max-size", str(limit), "--cache-dir", str(root)])
    assert real.exit_code == 0, real.output
    assert f"removed {root / 'a'} (" in real.output and "1 entry removed" in real.output
    assert sorted(os.listdir(root)) == ["b"]


@pytest.mark.parametrize("text, size", [("1024", 1024), ("500M", 500 * 2**20), ("20G", 20 * 2**30),
                                        ("20g", 20 * 2**30), ("20GiB", 20 * 2**30), ("1.5T", int(1.5 * 2**40)),
                                        ("64 KB", 64 * 1024), (0, 0)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "G", "-5G", "20X", "twenty", "1e9", "5 G B"])
def test_a_bad_size_is_a_one_line_error(text, tmp_path):
    with pytest.raises(LayerfuseError, match="is not a size"):
        parse_size(text)
    out = CliRunner().invoke(main, ["gc", "--max-size", text, "--cache-dir", str(tmp_path)])
    assert one_usage_error(out).startswith("Error: --max-size")


def test_a_fraction_of_a_byte_is_refused():
    """`--max-size 0.5` (a unit forgotten) was 0 bytes: a real run would evict every entry."""
    with pytest.raises(LayerfuseError, match=r"--max-size '0.5': a number of bytes is whole"):
        parse_size("0.5")
    assert parse_size("0.5G") == 2**29


def test_an_object_store_root_is_refused_in_one_line():
    out = CliRunner().invoke(main, ["gc", "--max-size", "1G", "--cache-dir", "memory://gc-root"])
    assert out.exit_code == 1 and out.output == "error: gc works on local cache roots only, not memory://gc-root\n"


def test_a_local_read_is_recorded_and_rm_leaves_no_record(make_entry, monkeypatch):
    from layerfuse.cache.manage import remove
    from layerfuse.cache.reader import open_entry

    path = make_entry("a")
    monkeypatch.setattr(usage, "_recorded", {})  # no earlier read of this process throttles this one
    assert usage.last_read(path) is None
    open_entry(path)
    assert usage.last_read(path) == pytest.approx(time.time(), abs=5)
    remove(path)
    assert not os.path.exists(path) and not os.path.exists(path + ".read") and usage.last_read(path) is None


KEY = "0123456789abcdef"  # entry folders are named model__dataset__<16 hex> (`layout.entry_path`)


def test_gc_reclaims_what_killed_removals_left_and_unreadable_entries(make_entry, root, monkeypatch):
    from layerfuse.cache import manage

    keep = make_entry(f"m__d__{'1' * 16}")
    # a removal killed after the rename: the hidden folder `remove` deletes from
    renamed = make_entry(f"m__d__{'2' * 16}")
    os.rename(renamed, manage.removal_folder(renamed))
    # a removal killed half-way through deleting the folder in place (as it did before the rename)
    orphan = make_entry(f"m__d__{'3' * 16}")
    os.remove(os.path.join(orphan, "zarr.json"))
    open(orphan + ".lock", "w").close()  # the lock its extract took beside it
    # an entry whose metadata no longer parses
    broken = make_entry(f"m__d__{KEY}")
    with open(os.path.join(broken, "zarr.json"), "w") as f:
        f.write("{not json")
    assert [e.path for e in manage.list_entries(str(root))] == [keep]  # ls sees only the intact one
    limit = bytes_on_disk(keep) + 4096  # the intact entry fits; nothing else should stay

    runner = CliRunner()
    dry = runner.invoke(main, ["gc", "--max-size", str(limit), "--dry-run", "--cache-dir", str(root)])
    assert dry.exit_code == 0, dry.output
    assert "what a killed removal or extract left" in dry.output and orphan in dry.output
    assert f"would remove {broken} (" in dry.output and "cannot be read" in dry.output
    assert len(dirs(root)) == 4  # a dry run removes nothing

    real = runner.invoke(main, ["gc", "--max-size", str(limit), "--cache-dir", str(root)])
    assert real.exit_code == 0, real.output
    assert dirs(root) == [os.path.basename(keep)]
    assert bytes_on_disk(str(root)) <= limit


def test_gc_leaves_folders_it_did_not_make_and_links_alone(root, tmp_path):
    """A folder of an entry's name but without an extract's lock beside it is the user's, and so is a
    link (and what it points to): gc neither removes nor reports them."""
    mine = root / f"a__b__{KEY}"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("precious")
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "f.txt").write_text("p")
    link = root / f"m__d__{'e' * 16}"
    link.symlink_to(target)

    result = CliRunner().invoke(main, ["gc", "--max-size", "1G", "--cache-dir", str(root)])
    assert result.exit_code == 0, result.output
    assert "removed " + str(root) not in result.output and result.output.startswith("0 entries removed")
    assert (mine / "notes.txt").read_text() == "precious" and link.is_symlink() and (target / "f.txt").exists()


def test_rm_renames_the_entry_before_deleting_it(make_entry, root, monkeypatch):
    from layerfuse.cache import manage

    path = make_entry(f"m__d__{KEY}")
    seen = []
    real_rmtree = manage.shutil.rmtree
    monkeypatch.setattr(manage.shutil, "rmtree", lambda p, *a, **k: seen.append(p) or real_rmtree(p, *a, **k))
    manage.remove(path)
    assert seen == [manage.removal_folder(path)] and not os.path.exists(path)


def test_gc_refuses_a_root_that_is_a_file_or_missing(tmp_path):
    """A mistyped --cache-dir is one line and exit 1, never '0 entries removed' as if all were well."""
    file = tmp_path / "a-file"
    file.write_text("x")
    for root, says in ((file, "is not a directory"), (tmp_path / "no-such-root", "does not exist")):
        result = CliRunner().invoke(main, ["gc", "--max-size", "1G", "--cache-dir", str(root)])
        assert result.exit_code == 1 and says in result.output and "removed" not in result.output, result.output


def test_a_gc_that_cannot_meet_the_limit_names_the_partial_entries_and_fails(make_entry, root):
    """It exited 0 beside a generic "still over the limit", though the help promises each entry kept is named."""
    partial = make_entry("partial")
    zarr.open_group(partial, mode="a")["dev"].attrs["complete"] = False
    result = CliRunner().invoke(main, ["gc", "--max-size", "1", "--cache-dir", str(root)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"error: still over the limit: what is left is in use, partial, or not an entry; partial entries are " \
           f"never removed: {partial}" in result.output
    dry = CliRunner().invoke(main, ["gc", "--max-size", "1", "--dry-run", "--cache-dir", str(root)])
    assert dry.exit_code == 0 and "still over the limit" in dry.output and os.path.isdir(partial)


def test_the_count_covers_every_removal(make_entry, root):
    """"0 entries removed" was printed right below a line removing a damaged entry."""
    broken = make_entry(f"m__d__{KEY}")
    with open(os.path.join(broken, "zarr.json"), "w") as f:
        f.write("{not json")
    result = CliRunner().invoke(main, ["gc", "--max-size", "1", "--cache-dir", str(root)])
    assert result.exit_code == 0, result.output
    assert f"removed {broken} (" in result.output and "1 entry removed" in result.output


def test_gc_removes_an_unfinished_entry_only_while_holding_its_lock(make_entry, root, monkeypatch):
    """gc checked that no extract held the lock, then removed the folder: an extract that took the lock in
    between lost its folder. The folder now goes while gc holds the lock, and the lock file stays."""
    from filelock import FileLock

    from layerfuse.cache import gc

    orphan = make_entry(f"m__d__{'3' * 16}")
    os.remove(os.path.join(orphan, "zarr.json"))
    open(orphan + ".lock", "w").close()
    monkeypatch.setattr(gc, "perhaps_written", lambda path: False)  # the check passed; then an extract starts
    extract = FileLock(orphan + ".lock")
    extract.acquire(timeout=0)
    try:
        assert gc.leftovers(str(root)) == [] and os.path.isdir(orphan)
    finally:
        extract.release()
    assert [path for path, _ in gc.leftovers(str(root))] == [orphan]
    assert not os.path.exists(orphan) and os.path.exists(orphan + ".lock")


def test_rm_removes_an_entry_only_while_holding_its_writer_lock(make_entry, root, monkeypatch):
    """rm checked that no extract held the lock, then renamed the folder away: an extract adding a label
    set in between lost its folder."""
    from filelock import FileLock

    from layerfuse.cache import manage, usage

    entry = make_entry(f"m__d__{'4' * 16}")
    monkeypatch.setattr(usage, "being_written", lambda path: False)  # the check passed; then an extract starts
    extract = FileLock(entry + ".lock")
    extract.acquire(timeout=0)
    try:
        with pytest.raises(usage.EntryInUse, match="being written by an extract"):
            manage.remove(entry)
        assert os.path.isdir(entry)
    finally:
        extract.release()
    manage.remove(entry)
    assert not os.path.exists(entry) and not os.path.exists(entry + ".lock")


def test_a_linked_entry_stays_and_rm_refuses_it(make_entry, root, tmp_path, monkeypatch):
    """A link to an entry elsewhere: gc renamed it, then crashed in rmtree ("Cannot call rmtree on a symbolic
    link") after removing older entries without a word, and the link vanished from `ls`; rm did the same."""
    old = make_entry(f"m__d__{'1' * 16}")
    shutil.copytree(old, tmp_path / "elsewhere")
    link = root / f"m__d__{'2' * 16}"
    link.symlink_to(tmp_path / "elsewhere")
    read_at(str(link), time.time() - 10 * HOUR, monkeypatch)  # the least recently used
    read_at(old, time.time() - HOUR, monkeypatch)
    result = CliRunner().invoke(main, ["gc", "--max-size", "0", "--cache-dir", str(root)])
    assert f"removed {old} (" in result.output and str(link) not in result.output.replace(str(link) + ".", "")
    assert link.is_symlink() and (tmp_path / "elsewhere" / "zarr.json").is_file()
    refused = CliRunner().invoke(main, ["rm", "--yes", str(link)])
    assert refused.exit_code == 1 and f"{link} is a link to " in refused.output, refused.output
    assert link.is_symlink() and not os.path.exists(str(link) + ".lock")
    asked = CliRunner().invoke(main, ["rm", str(link)], input="")  # refused before it asks, not after a "y"
    assert asked.exit_code == 1 and "delete " not in asked.output and f"{link} is a link to " in asked.output


def test_gc_says_when_a_removed_entry_was_last_read(make_entry, root, monkeypatch):
    """The real run showed the entry's finish time: its record of the last read had gone with it."""
    entry = make_entry(f"m__d__{'3' * 16}")
    finished_at(entry, time.strftime(FINISHED_FORMAT, time.localtime(time.time() - 5 * HOUR)))
    read_at(entry, time.time() - 3 * HOUR, monkeypatch)
    told = time.strftime("%Y-%m-%d %H:%M", time.localtime(time.time() - 3 * HOUR))
    for args in (["--dry-run"], []):
        out = CliRunner().invoke(main, ["gc", "--max-size", "0", "--cache-dir", str(root), *args])
        assert f"last used {told})" in out.output, out.output


def test_a_read_recorded_in_the_future_is_no_evidence_of_use(make_entry, root, monkeypatch):
    """An entry whose record of reads came, times kept (cp -a, rsync -a), from a machine whose clock runs
    ahead ranked as the most recently used, and stayed for ever, while entries read just now were removed."""
    copied, read_now, read_before = (make_entry(f"m__{n}__{'4' * 16}") for n in ("copied", "now", "before"))
    for path in (copied, read_now, read_before):
        finished_at(path, "2020-01-02T03:04:05+0000")
    now = time.time()
    read_at(copied, now + 3000 * HOUR, monkeypatch)  # never read here
    read_at(read_now, now, monkeypatch)
    read_at(read_before, now - HOUR, monkeypatch)
    out = CliRunner().invoke(main, ["gc", "--max-size", str(bytes_on_disk(str(root)) - 1), "--cache-dir", str(root)])
    assert out.exit_code == 0, out.output
    assert dirs(root) == sorted(os.path.basename(p) for p in (read_now, read_before))  # ranked by its finish
    future = time.strftime("%Y-%m-%d %H:%M", time.localtime(now + 3000 * HOUR))
    assert f"removed {copied} (" in out.output
    assert f"last used 2020-01-02 03:04; its recorded read ({future}) lies in the future)" in out.output, out.output


def test_an_entry_whose_only_times_lie_in_the_future_goes_first_as_last_used_unknown(make_entry, root):
    """An entry whose splits were stamped finished by a clock years ahead was kept before every other
    entry, however long ago those were read, and gc would have said it was last used in 2030."""
    ahead, unread = make_entry(f"m__ahead__{'5' * 16}"), make_entry(f"m__unread__{'5' * 16}")
    finished_at(ahead, "2030-01-01T00:00:00+0000")
    finished_at(unread, "2020-01-02T03:04:05+0000")
    removed = collect(str(root), max_size=bytes_on_disk(str(root)) - 1, dry_run=True)
    assert names(removed) == [os.path.basename(ahead)]
    out = CliRunner().invoke(main, ["gc", "--max-size", "0", "--dry-run", "--cache-dir", str(root)])
    future = time.strftime("%Y-%m-%d %H:%M", time.localtime(finished_seconds("2030-01-01T00:00:00+0000")))
    said = f"last used unknown: its recorded finish ({future}) lies in the future)"
    assert f"would remove {ahead} (" in out.output and said in out.output, out.output
    assert out.output.index(ahead) < out.output.index(unread)  # oldest first


def test_a_dry_run_with_leftovers_lists_what_the_real_run_removes(make_entry, root):
    """A dry run counted a killed removal's folder as still there, and listed entries the real run keeps."""
    from layerfuse.cache import manage

    keep = make_entry(f"m__d__{'1' * 16}")
    renamed = make_entry(f"m__d__{'2' * 16}")
    os.rename(renamed, manage.removal_folder(renamed))
    limit = bytes_on_disk(keep) + 4096
    dry = CliRunner().invoke(main, ["gc", "--max-size", str(limit), "--dry-run", "--cache-dir", str(root)])
    assert dry.exit_code == 0 and "1 entry would be removed" in dry.output and keep not in dry.output, dry.output
    real = CliRunner().invoke(main, ["gc", "--max-size", str(limit), "--cache-dir", f"file://{root}"])
    assert real.exit_code == 0 and "1 entry removed" in real.output, real.output  # a file:// root is local
    assert dirs(root) == [os.path.basename(keep)]


def test_rm_of_dot_inside_the_entry_removes_it(make_entry, root, monkeypatch):
    """`cd ENTRY && layerfuse rm --yes .` failed with "Device or resource busy (.)" and left a `..lock` in it."""
    entry = make_entry(f"m__d__{'1' * 16}")
    monkeypatch.chdir(entry)
    result = CliRunner().invoke(main, ["rm", "--yes", "."])
    assert result.exit_code == 0 and result.output == f"removed {entry}\n", result.output
    assert os.listdir(root) == []


def _deny_writes_in(monkeypatch, folder: str) -> None:
    """os.access as a colleague sees ``folder``: not theirs to write in (tests may run as root)."""
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m, **kw: False if os.path.abspath(p) == folder and m & os.W_OK
                        else real(p, m, **kw))


def test_an_entry_this_user_may_not_remove_stays_listed(make_entry, root, monkeypatch):
    """rm and gc renamed the entry to its removal name, then failed in rmtree on a colleague's folder
    ("Permission denied (zarr.json)"): the entry vanished from `ls`, and the next gc deleted it as what a
    killed removal left. Now the whole tree is checked first, and the folder that blocks is named."""
    entry = make_entry(f"m__d__{'1' * 16}")
    blocked = os.path.join(entry, "train", "hidden")
    _deny_writes_in(monkeypatch, blocked)
    refusal = f"{entry} cannot be removed: no read, write and search permission on {blocked} for this user"
    asked = CliRunner().invoke(main, ["rm", entry], input="y\n")  # refused before it asks, not after a "y"
    assert asked.exit_code == 1 and "delete " not in asked.output and refusal in asked.output, asked.output
    gc = CliRunner().invoke(main, ["gc", "--max-size", "0", "--cache-dir", str(root)])
    assert f"skipped {entry}: no read, write and search permission on {blocked}" in gc.output, gc.output
    dry = CliRunner().invoke(main, ["gc", "--max-size", "0", "--dry-run", "--cache-dir", str(root)])
    assert "0 entries would be removed" in dry.output, dry.output
    assert dirs(root) == [os.path.basename(entry)]
    listed = CliRunner().invoke(main, ["ls", "--cache-dir", str(root)])
    assert listed.exit_code == 0 and entry in listed.output
    _deny_writes_in(monkeypatch, str(root))  # the root itself: neither renamed nor its lock removed
    refused = CliRunner().invoke(main, ["rm", "--yes", entry])
    assert f"{entry} cannot be removed: no write permission on {root} for this user" in refused.output


def test_a_removal_that_fails_names_the_whole_path_of_the_file(make_entry, root, monkeypatch):
    """A removal that failed on a file said "Permission denied (zarr.json)": which zarr.json, of which entry,
    was left to guess."""
    from layerfuse.cache import manage

    entry = make_entry(f"m__d__{'1' * 16}")
    real = os.unlink

    def unlink(name, *args, dir_fd=None, **kw):
        if os.path.basename(name) == "zarr.json":
            raise PermissionError(13, "Permission denied", name)
        return real(name, *args, dir_fd=dir_fd, **kw)

    monkeypatch.setattr(os, "unlink", unlink)
    result = CliRunner().invoke(main, ["rm", "--yes", entry])
    trash = manage.removal_folder(entry)
    assert result.exit_code == 1 and f"Permission denied ({trash}/" in result.output, result.output


def test_a_colleagues_read_is_recorded(make_entry, root, monkeypatch):
    """A read was recorded by setting the record's times explicitly, which only its owner may do: a colleague's
    reads were never recorded (the error passed over as a read-only root's), and gc evicted an entry in use."""
    entry = make_entry(f"m__d__{'1' * 16}")
    os.close(os.open(entry + ".read", os.O_CREAT | os.O_WRONLY, 0o666))
    os.utime(entry + ".read", (time.time() - 10 * HOUR,) * 2)  # the owner's read, long ago
    real = os.utime

    def not_the_owner(path, times=None, **kw):  # what the kernel allows one who may write but does not own
        if times is not None:
            raise PermissionError(1, "Operation not permitted", path)
        return real(path, times, **kw)

    monkeypatch.setattr(os, "utime", not_the_owner)
    usage.mark_read(entry)
    assert usage.last_read(entry) == pytest.approx(time.time(), abs=60)


def test_an_entry_whose_lock_this_user_may_not_open_is_skipped_and_the_others_collected(make_entry, root,
                                                                                        monkeypatch):
    """gc probed each entry's writer lock by opening it for writing: one entry whose lock a colleague made
    private ended gc for the whole root in "Permission denied (....lock)"."""
    import filelock

    private, other = make_entry(f"m__d__{'1' * 16}"), make_entry(f"m__d__{'2' * 16}")
    for path in (private, other):
        open(path + ".lock", "w").close()
    real = filelock.FileLock

    class NotMine:
        def __init__(self, path):
            self.path = path

        def acquire(self, timeout=None):
            raise PermissionError(13, "Permission denied", self.path)

    monkeypatch.setattr(filelock, "FileLock", lambda path, *a, **kw: NotMine(path) if path == private + ".lock"
                        else real(path, *a, **kw))
    said = f"skipped {private}: perhaps being written: this user may not open its lock {private}.lock"
    dry = CliRunner().invoke(main, ["gc", "--max-size", "0", "--dry-run", "--cache-dir", str(root)])
    assert said in dry.output and f"would remove {other} (" in dry.output, dry.output
    real_run = CliRunner().invoke(main, ["gc", "--max-size", "0", "--cache-dir", str(root)])
    assert said in real_run.output and f"removed {other} (" in real_run.output, real_run.output
    assert dirs(root) == [os.path.basename(private)]


def test_an_entry_this_user_may_not_read_is_not_removed_as_damaged(make_entry, root, monkeypatch):
    """gc took an entry whose metadata the user may not read (a colleague's, private) for a damaged one, and
    removed it first where the folders let it."""
    from layerfuse.cache import gc, manage

    private = make_entry(f"m__d__{'1' * 16}")
    real = gc.entry_status

    def status(path, **kw):
        if path == private:
            raise PermissionError(13, "Permission denied", os.path.join(private, "zarr.json"))
        return real(path, **kw)

    for module in (gc, manage):  # what gc reads, and what it lists entries with
        monkeypatch.setattr(module, "entry_status", status)
    assert gc.damaged(str(root)) == []
    collect(str(root), max_size=0)
    assert os.path.isdir(private)


def test_a_file_gone_or_a_dangling_link_in_an_entry_counts_nothing(make_entry, root, monkeypatch):
    """A dangling link in a copied entry, or a partial file an extract renamed away between the listing and
    the size, made `gc` of the whole root fail and `ls`/`info` call a healthy entry unreadable."""
    path = make_entry("a")
    size = bytes_on_disk(path)
    os.symlink("/nonexistent/file", os.path.join(path, "train", "stale"))
    assert bytes_on_disk(path) == size  # a link counts as what it points to: nothing
    real_walk = os.walk

    def walk_listing_a_vanished_file(top, *a, **k):
        for folder, subdirs, files in real_walk(top, *a, **k):
            yield folder, subdirs, [*files, ".0.999.partial"]  # listed, then renamed away by an extract

    monkeypatch.setattr(os, "walk", walk_listing_a_vanished_file)
    assert bytes_on_disk(str(root)) >= size
    monkeypatch.undo()
    gc = ["gc", "--max-size", "1T", "--cache-dir", str(root)]
    for args in (["ls", "--cache-dir", str(root)], ["info", path], gc):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
        assert "unreadable" not in result.output
