"""Is the HF hub there? Asked once, in seconds, so an offline machine fails fast instead of
retrying for a minute inside `from_pretrained` or `load_dataset`."""

from __future__ import annotations

import functools
import os
import urllib.error
import urllib.request

TIMEOUT_S = 3.0


def env_offline() -> bool:
    """True when the user told HF libraries to stay off the network."""
    flags = (os.environ.get(k, "") for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return any(f.strip().upper() in ("1", "ON", "YES", "TRUE") for f in flags)


@functools.lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """Probe the hub endpoint with a short timeout (an HTTP error still means the network works)."""
    if env_offline():
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=TIMEOUT_S)
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def go_offline() -> None:
    """Tell the HF libraries to use their local cache only (they read the flag at import, so an
    already imported huggingface_hub is told directly too)."""
    import sys

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None and hasattr(constants, "HF_HUB_OFFLINE"):
        constants.HF_HUB_OFFLINE = True
