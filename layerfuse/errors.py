"""The one exception type users see; the CLI prints its message on one line and exits non-zero."""


class LayerfuseError(Exception):
    """A problem with the user's input, files or cache; the message names the value, file and line."""


class OptionError(LayerfuseError):
    """A bad option value, or options that do not go together: the caller's mistake, not a failure of the
    files or the cache; the CLI says it as click says its own (usage, then ``Error: ...``) and exits 2."""


class NewerFormatError(LayerfuseError):
    """A cache entry written by a newer layerfuse: not damaged, only not readable by this release (`gc` keeps it)."""


class IncompleteEntryError(LayerfuseError):
    """A cache entry (or split) whose extraction has not finished; it is never read as complete."""


def removed_names(module: str, replacements: dict[str, str]):
    """A module's ``__getattr__`` for the names it no longer offers: importing one is one line naming
    what replaced it (``{old name: new dotted name}``), instead of a bare "cannot import name"."""
    def __getattr__(name: str):
        if name in replacements:
            raise ImportError(f"{module}.{name} is gone: use {replacements[name]}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return __getattr__


def not_utf8(path) -> LayerfuseError:
    """The error for a file that does not decode as UTF-8, naming its first bad line and byte (a text
    stream fails a whole read-ahead block at once, so the line it was on when it failed is not the one).
    Lines are counted as the readers count them (universal newlines: a classic-Mac file ends its lines
    with a lone CR); a file that starts with a UTF-16 byte-order mark is said to be UTF-16."""
    number = 0
    with open(path, "rb") as f:
        if f.read(2) in (b"\xff\xfe", b"\xfe\xff"):
            return LayerfuseError(f"{path}: UTF-16 text (it starts with a UTF-16 byte-order mark); save it as UTF-8")
        f.seek(0)
        for raw in f:
            for line in raw.rstrip(b"\n").removesuffix(b"\r").split(b"\r"):
                number += 1
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as err:
                    return LayerfuseError(f"{path}:{number}: not UTF-8 text (byte 0x{line[err.start]:02x} at "
                                          f"column {err.start + 1})")
    return LayerfuseError(f"{path}: not UTF-8 text")
