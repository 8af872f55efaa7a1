"""Where cache entries live and what they are called.

An entry is one zarr v3 group holding every layer of one backbone over one dataset, with one
subgroup per split. Its path derives from everything that changes the stored numbers, so a
changed option makes a new entry and an unchanged one finds the old entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import warnings

from ..errors import LayerfuseError

FORMAT_VERSION = 1


@contextlib.contextmanager
def strays_unsaid():
    """No zarr warning of a file or folder in a group that is no part of it ("Object at X is not recognized
    as a component of a Zarr hierarchy", two lines on stderr): a ``.DS_Store`` copied from a Mac, zarr's own
    ``zarr.<hex>.partial`` while an extract writes, an array's folder left without its zarr.json. What an
    entry lacks is named by its own checks (`manage.verify`'s list of files) in one line."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Object at .* is not recognized", category=UserWarning)
        yield


SPLIT_ORDER = ("train", "dev", "test")  # how splits are listed and shown; any other name follows, sorted


def subgroups(group) -> list:
    """``group.groups()``, `strays_unsaid`: `ls`, `info`, `gc` and `train-head` printed the warning. In
    `SPLIT_ORDER`, then by name: the store lists in its own order (a folder's, an HTTP listing's), so `info`
    showed test, train, dev on one disk and dev, test, train over HTTP."""
    with strays_unsaid():
        found = list(group.groups())
    return sorted(found, key=lambda item: (SPLIT_ORDER.index(item[0]) if item[0] in SPLIT_ORDER else len(SPLIT_ORDER),
                                           item[0]))


def newer_format(path: str, version) -> str | None:
    """Why an entry of cache format ``version`` cannot be read here (written by a newer layerfuse, whose
    layout this one would misread), or None."""
    if isinstance(version, int) and version > FORMAT_VERSION:
        return (f"{path} was written by a newer layerfuse (cache format {version}; this one reads format "
                f"{FORMAT_VERSION}): upgrade layerfuse (pip install -U layerfuse) to read it")
    return None

# Fields that decide the stored numbers; the entry key hashes exactly these.
KEY_FIELDS = (
    "model",
    "model_revision",
    "dataset_fingerprint",
    "granularity",
    "pooling",
    "dtype",
    "max_length",
    "precision",
)
# Fields added later that enter the key only when set (true), so every entry made without them keeps
# its key: ``special_tokens`` (subword caches that also hold the rows of [CLS]/[SEP], <s>/</s>).
OPTIONAL_KEY_FIELDS = ("special_tokens",)
# The entry attribute listing every split an extraction was asked for, written before the first of
# them: the entry is complete only when each one is.
PLAN = "planned_splits"
FINISHED_FORMAT = "%Y-%m-%dT%H:%M:%S%z"  # how a split's "finished" is stamped: local time and its offset
# A local model folder's revision begins so (a hash of its content, `extract.models.content_fingerprint`):
# that content is the model, whatever the folder is named.
CONTENT_REVISION = "content:"


def is_content_revision(revision) -> bool:
    """Whether ``revision`` is a local folder's (`CONTENT_REVISION`): its content is the model, its name not."""
    return str(revision or "").startswith(CONTENT_REVISION)
# The cache-root variable of the package's former name, read when $LAYERFUSE_HOME is unset.
RENAMED_HOME_ENV = "LAYERCACHE_HOME"
_SAID: list = []  # the notice below, once given


def home_path(path: str) -> str:
    """``path`` with a leading ``~`` read as the home folder (a quoted ``--cache-dir=~/x``, a ``~`` in an env
    file: not a folder named ~). With no home folder to read it as (HOME unset, and a user id the password
    file does not know: a batch job's, a container's), one line says so: the ``~`` was kept as written, and
    the default cache root became a folder named ~ in the working folder."""
    expanded = os.path.expanduser(path)
    if expanded == "~" or expanded.startswith("~" + os.sep):  # `~name` of no user is a name, kept as written
        raise LayerfuseError(f"{path}: there is no home folder to read ~ as (HOME is unset, and user id "
                             f"{os.getuid()} has no home in the password file); set HOME, or name the folder in "
                             "full ($LAYERFUSE_HOME or --cache-dir for the cache root)")
    return expanded


def default_root() -> str:
    """`~/.cache/layerfuse`: the cache root when none is named, and the local one of a remote root's."""
    return os.path.join(home_path("~"), ".cache", "layerfuse")


def cache_root(cache_dir: str | os.PathLike | None = None) -> str:
    """`--cache-dir`, else `$LAYERFUSE_HOME`, else `~/.cache/layerfuse` (or, while only it exists, the
    former name's `~/.cache/layercache`: its entries were made for the same package)."""
    if cache_dir:
        return home_path(str(cache_dir))
    env = os.environ.get("LAYERFUSE_HOME")
    if env:
        return home_path(env)
    old = os.environ.get(RENAMED_HOME_ENV)
    if old:  # the variable of the project's former name: still read, said so once a process
        if not _SAID:
            sys.stderr.write(f"note: ${RENAMED_HOME_ENV} is read as $LAYERFUSE_HOME (the package was renamed "
                             "from layercache, a name taken on PyPI by an unrelated project); set $LAYERFUSE_HOME\n")
            _SAID.append(True)
        return home_path(old)
    default = default_root()
    former = os.path.join(os.path.dirname(default), "layercache")
    if not os.path.exists(default) and os.path.isdir(former):  # else every entry made before was extracted again
        if not _SAID:
            sys.stderr.write(f"note: using the cache root {former} of the package's former name (layercache); "
                             f"`mv {former} {default}` makes it the default's\n")
            _SAID.append(True)
        return former
    return default


def checked_root(cache_dir: str | None, *, write: bool, writes: str = "this command writes there") -> str:
    """``cache_root(cache_dir)``, refused in one line when it (or, not made yet, the folder it would be
    made in) is a file, unreadable, or read-only while ``write`` (``writes``: what is written there, said
    then). A remote root (fsspec URL) is left to its store, which names its own errors. Commands that may
    write nothing (an entry found complete) check ``write`` only once something is to be written."""
    root = cache_root(cache_dir)
    if is_remote(root):
        return root
    path = os.path.abspath(local_path(root))
    name = f"--cache-dir {cache_dir}" if cache_dir else f"the cache root {path}"
    existing = path
    while not os.path.lexists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)  # the root is made on first write: its nearest existing folder
    if not os.path.isdir(existing):
        where = "" if existing == path else f" ({existing} is one)"
        raise LayerfuseError(f"{name} is not a directory{where}: name a folder, or a path where one can be made")
    if existing == path and not os.access(path, os.R_OK | os.X_OK):
        raise LayerfuseError(f"{name} is not readable (permission denied)")
    if write and not os.access(existing, os.W_OK | os.X_OK):
        what = "is read-only" if existing == path else f"cannot be made: {existing} is read-only"
        raise LayerfuseError(f"{name} {what}; {writes} (name a writable --cache-dir)")
    return root


def is_remote(path: str) -> bool:
    """True for fsspec URLs (s3://, gs://, memory://); file:// counts as local."""
    return "://" in path and not path.startswith("file://")


def local_path(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def slug(text: str) -> str:
    """A short, filesystem-safe rendering of a model or dataset name for the entry's directory."""
    base = text.rstrip("/\\").replace("\\", "/")
    if os.sep in base or "/" in base:
        parts = [p for p in base.split("/") if p]
        base = "-".join(parts[-2:]) if len(parts) > 1 else parts[-1]
    # no leading dot: a model in a hidden folder (``.models/x``) must not make a hidden entry
    return re.sub(r"[^A-Za-z0-9._-]+", "-", base).lstrip(".-").rstrip("-")[:48] or "x"


def entry_key(fields: dict) -> str:
    """sha256 over the key fields, as canonical JSON; 16 hex digits are plenty to avoid clashes. A local
    folder's name is not keyed: its revision (`CONTENT_REVISION`) is its content, whatever it is named."""
    missing = [f for f in KEY_FIELDS if f not in fields]
    if missing:
        raise ValueError(f"entry key needs {missing}")
    keyed = {f: fields[f] for f in KEY_FIELDS}
    if is_content_revision(keyed["model_revision"]):
        keyed["model"] = CONTENT_REVISION
    keyed.update({f: fields[f] for f in OPTIONAL_KEY_FIELDS if fields.get(f)})
    blob = json.dumps(keyed, sort_keys=True)
    return hashlib.sha256(f"v{FORMAT_VERSION}:{blob}".encode()).hexdigest()[:16]


# `entry_path`'s folder names: what tells a folder whose metadata cannot be read for an entry (`gc`, `rm`)
ENTRY_NAME = re.compile(r"^.+__.+__[0-9a-f]{16}$")


def entry_path(root: str, *, model_name: str, dataset_name: str, key: str) -> str:
    name = f"{slug(model_name)}__{slug(dataset_name)}__{key}"
    return root.rstrip("/") + "/" + name
