"""Is the HF hub there? Asked in seconds, so an offline machine fails fast instead of retrying for a
minute inside `from_pretrained` or `load_dataset`; the answer is kept a minute, not for the life of
the process, so a notebook sees the hub once it is back."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request

TIMEOUT_S = 3.0
REASK_AFTER_S = 60.0  # how long an answer of the probe is taken as still true

_answers: dict[str, tuple[float, bool]] = {}  # endpoint -> (when it was asked, reachable)


def env_offline() -> bool:
    """True when the user told HF libraries to stay off the network."""
    flags = (os.environ.get(k, "") for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return any(f.strip().upper() in ("1", "ON", "YES", "TRUE") for f in flags)


def hub_reachable() -> bool:
    """Whether the hub endpoint answers, probed at most once per `REASK_AFTER_S` and endpoint."""
    if env_offline():
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    asked = _answers.get(endpoint)
    if asked is None or time.monotonic() - asked[0] > REASK_AFTER_S:
        asked = _answers[endpoint] = (time.monotonic(), _probe(endpoint))
    return asked[1]


def _probe(endpoint: str) -> bool:
    """One HEAD request with a short timeout (an HTTP error still means the network works)."""
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=TIMEOUT_S)
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True

