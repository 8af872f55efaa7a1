"""What every live split shares, sentences (`data.LiveSplit`) or MLM blocks (`mlm.LiveBlocks`)."""

from __future__ import annotations

from ..errors import LayerfuseError
from ..training.arrays import Split


class LiveStates(Split):
    """What every live split shares: hidden states come from the backbone per batch, never kept."""

    static = False  # hidden states change while the backbone trains: never cache eval batches

    @property
    def hidden(self):
        raise LayerfuseError("FT mode computes hidden states live; --layers auto:K and xie need a cache (use FE)")

    @property
    def row_bytes(self) -> int:
        return 0  # never kept: live batches are built per evaluation
