"""The one exception type users see; the CLI prints its message on one line and exits non-zero."""


class LayerfuseError(Exception):
    """A problem with the user's input, files or cache; the message names the value, file and line."""


class IncompleteEntryError(LayerfuseError):
    """A cache entry (or split) whose extraction has not finished; it is never read as complete."""
