"""Times as the JSON API gives them: ISO 8601 in UTC to the microsecond, ``2024-05-01T10:00:00.000000+00:00``,
as job files have always stored theirs. An entry stores its ``created`` and a split its ``created`` and
``finished`` in local time with the writer's offset (``2024-05-01T12:00:00+0200``, which other releases read),
and a read is known as seconds since the epoch: all are converted here, where they leave the server, and
stored as they were. Two formats in one API made a client that sorted or compared them as text wrong."""

from __future__ import annotations

from datetime import UTC, datetime

STAMPS = ("created", "started", "finished", "last_read")  # the API's fields that hold a time


def api_time(value):
    """``value`` (a stamp as stored, seconds since the epoch, or None) in the API's format; a stored stamp that
    does not read as a time is given as stored (what a hand edit left), None as None."""
    if value is None:
        return None
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            moment = datetime.fromtimestamp(value, UTC)
        else:
            moment = datetime.fromisoformat(value).astimezone(UTC)  # a stamp of no offset: local time
    except (TypeError, ValueError, OverflowError, OSError):
        return value
    return moment.isoformat(timespec="microseconds")


def api_times(fields: dict) -> dict:
    """``fields`` with each time of `STAMPS` it holds in the API's format."""
    return {name: api_time(value) if name in STAMPS else value for name, value in fields.items()}
