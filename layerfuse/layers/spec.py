"""The one parser of ``--layers``, shared by every command.

Layer ids are the cache's: 0 = the embedding output, 1..L = the transformer layers (as in the
paper and in HF ``output_hidden_states``). A spec is

- ``all`` (or nothing): 1..L, the layers the paper's heads fuse;
- ``4,8,12``, ``1..6``, ``2-4,6``, ``0..L``: the layers named (ranges inclusive; 0 allowed when
  named; ``L`` is the last layer; a layer named twice is an error, since it is almost always a typo);
- ``auto:K``: the K of 1..L with the lowest variability nu, scored on the run's own sample.

`train-head`, `sweep` and `predict` fuse ``fused(...)``; `rank-layers` scores ``candidates`` and
marks the auto:K pick when one is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LayerfuseError
from .variability import pick_layers


@dataclass(frozen=True)
class LayerSpec:
    """A parsed spec: the layers to hold (``candidates``, sorted) and ``k`` for ``auto:K``."""

    candidates: tuple[int, ...]
    k: int | None = None

    @property
    def n_fused(self) -> int:
        return self.k or len(self.candidates)

    def fused(self, scores: list[tuple[int, float]] | None = None) -> tuple[int, ...]:
        """The layers a head fuses: the candidates, or the auto:K pick from their ``scores``."""
        if self.k is None:
            return self.candidates
        if scores is None:
            raise LayerfuseError(f"auto:{self.k} needs layer scores from the training sample")
        return tuple(pick_layers(scores, self.k))

    def describe(self, num_layers: int) -> str:
        return f"auto:{self.k} of 1..{num_layers}" if self.k else ",".join(map(str, self.candidates))


def parse_layers(spec: str | None, *, num_layers: int) -> LayerSpec:
    """Parse a ``--layers`` value against a backbone of ``num_layers`` layers (see the module doc).

    Layers come back sorted, so a head's top layer (its residual, and Base's only input) is the
    highest one named, whatever the order in the spec.
    """
    L = int(num_layers)
    text = "" if spec is None else str(spec).strip().lower()
    if text in ("", "all"):
        return LayerSpec(tuple(range(1, L + 1)))
    if text == "auto" or text.startswith("auto:"):
        return LayerSpec(tuple(range(1, L + 1)), _auto_k(spec, text[5:], L))
    out: list[int] = []
    for part in text.split(","):
        for x in _ids(spec, part.strip().replace("l", str(L))):
            if not 0 <= x <= L:
                raise LayerfuseError(f"layer {x} in {spec!r} is out of range: valid layers are 0..{L} "
                                      f"(0 = embedding output, 1..{L} = transformer layers)")
            if x in out:
                raise LayerfuseError(f"layer {x} is named twice in {spec!r}")
            out.append(x)
    return LayerSpec(tuple(sorted(out)))


def _auto_k(spec: str, k_text: str, L: int) -> int:
    try:
        k = int(k_text.strip())
    except ValueError:
        raise LayerfuseError(f"bad layer spec {spec!r}: use auto:K with K an integer in 1..{L}") from None
    if not 1 <= k <= L:
        raise LayerfuseError(f"auto:{k} is out of range: K must be in 1..{L} (the backbone's layers)")
    return k


def _ids(spec: str, part: str) -> list[int]:
    """One comma-separated part: ``3``, ``1..6`` or ``2-4``."""
    lo, sep, hi = part.partition("..") if ".." in part else part.partition("-")
    try:
        ids = list(range(int(lo), int(hi) + 1)) if sep and lo else [int(part)]
    except ValueError:
        raise LayerfuseError(f"bad layer spec {spec!r} at {part!r}: use all, 4,8,12, 1..6, 0..L or auto:K") from None
    if sep and lo and int(lo) > int(hi):
        raise LayerfuseError(f"bad layer range {part!r} in {spec!r}: start is after end")
    return ids
