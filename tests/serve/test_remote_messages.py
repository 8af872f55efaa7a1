"""What a client is told of an entry the server does not serve."""

from __future__ import annotations

import pytest

from layerfuse.cache.store import open_group
from layerfuse.errors import LayerfuseError


def test_an_entry_not_served_says_why_it_may_be_missing(served):
    """An entry being extended (a job adding dev) read as plain "no cache entry at URL" while the server's
    404 said it was not complete yet."""
    url = f"{served.url}/entries/not-served-yet"
    with pytest.raises(LayerfuseError, match=r"no cache entry at .*not-served-yet \(a server serves complete entries "
                                             r"only, none being extracted or extended\)"):
        open_group(url)
