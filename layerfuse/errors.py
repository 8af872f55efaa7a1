"""The one exception type users see; the CLI prints its message on one line and exits non-zero."""


class LayerfuseError(Exception):
    """A problem with the user's input, files or cache; the message names the value, file and line."""


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
