"""The one parser of ``--layers``, shared by every command.

Layer ids are the cache's: 0 = the embedding output, 1..L = the transformer layers (as in the
paper and in HF ``output_hidden_states``). A spec is

- ``all`` (or nothing): 1..L, the layers the paper's heads fuse;
- ``4,8,12``, ``1..6``, ``2-4,6``, ``0..L``: the layers named (ranges inclusive; 0 allowed when
  named; ``L`` is the last layer; a layer named twice is an error, since it is almost always a typo);
- ``auto:K``: the K of 1..L with the lowest variability nu, scored on the run's own sample;
- ``xie`` or ``xie:K``: Xie et al.'s rule: the classifier sits on the lowest-nu layer k of 1..L
  (scored on the run's own sample) and the layers above it are dropped; the head reads the K
  layers ending at k (K = 1: layer k alone; fewer when k < K, never a layer above k). Compare it
  with ``L-K+1..L``, as many top layers.

`train-head`, `sweep` and `predict` fuse ``fused(...)``; `rank-layers` scores ``candidates`` and
marks the auto:K (or xie:K) pick when one is asked for.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import LayerfuseError, OptionError
from .variability import pick_layers

# The specs that rank 1..L by nu on the run's sample, and their K when none is given (auto alone
# has none: it asks for one).
RANKED = {"auto": "", "xie": "1"}


@dataclass(frozen=True)
class LayerSpec:
    """A parsed spec: the layers to hold (``candidates``, sorted), and for a ranked spec its
    ``rule`` (``auto`` or ``xie``) and ``k``."""

    candidates: tuple[int, ...]
    k: int | None = None
    rule: str = "auto"

    @property
    def n_fused(self) -> int:
        """The layers a head fuses (for ``xie:K`` at most: fewer when the pick is below layer K)."""
        return self.k or len(self.candidates)

    def fused(self, scores: list[tuple[int, float]] | None = None) -> tuple[int, ...]:
        """The layers a head fuses: the candidates, or the ranked pick from their ``scores``."""
        if self.k is None:
            return self.candidates
        if scores is None:
            raise LayerfuseError(f"{self.rule}:{self.k} needs layer scores from the training sample")
        if self.rule == "xie":
            (top,) = pick_layers(scores, 1)
            return tuple(x for x in range(top - self.k + 1, top + 1) if x in self.candidates)
        return tuple(pick_layers(scores, self.k))

    def describe(self, num_layers: int) -> str:
        return f"{self.rule}:{self.k} of 1..{num_layers}" if self.k else ",".join(map(str, self.candidates))


def xie_shortfall(spec: str | None, fused: list[int], *, num_layers: int) -> str | None:
    """The line that says a ``xie:K`` run fused fewer than K layers (its pick lies too low for K
    candidates to end there), or None."""
    parsed = parse_layers(spec, num_layers=num_layers)
    if parsed.rule != "xie" or not parsed.k or len(fused) >= parsed.k:
        return None
    return (f"--layers {spec}: the lowest-nu layer is {max(fused)}, with {len(fused) - 1} candidate layer"
            f"{'s' * (len(fused) != 2)} below it: {len(fused)} fused, not {parsed.k}")


def canonical_layers(spec: str | None, *, num_layers: int) -> str | None:
    """``spec``, or None where it names the default layers 1..L however it is written (``all``, ``1..L``,
    ``1-6``): the default run has one name, so a sweep rerun with ``--layers all`` skips it rather than
    training it again and averaging each seed with itself. Another set keeps its spelling, which its
    runs' ids hash; `layer_set` tells two spellings of one set apart from two sets."""
    return None if layer_set(spec, num_layers=num_layers) is None else spec


def layer_set(spec: str | None, *, num_layers: int) -> tuple | str | None:
    """What ``spec`` names, whatever its spelling: None for the default layers 1..L, the sorted layer ids
    of any other set (``6,4,5``, ``4-6`` and ``4..L`` on six layers are one), ``rule:K`` for a ranked one."""
    parsed = parse_layers(spec, num_layers=num_layers)
    if parsed.k is not None:
        return f"{parsed.rule}:{parsed.k}"
    return None if parsed.candidates == tuple(range(1, num_layers + 1)) else parsed.candidates


def layers_named(spec: str) -> str:
    """``spec`` as part of a file name: a range ``_`` (``1-3`` and ``1..3`` are ``1_3``), a list or a rule
    ``.`` (``1,3`` is ``1.3``, ``auto:3`` is ``auto.3``), nothing a file system refuses. Two sets of other
    layers never share a name: ``1-3`` and ``1,3`` both read ``1.3`` once, and one run's file replaced
    the other's."""
    text = re.sub(r"\.\.|-", "_", re.sub(r"\s+", "", str(spec)))
    return re.sub(r"[^0-9a-zA-Z_]+", ".", text).strip("._")


def ranking_rule(spec: str | None) -> str | None:
    """The rule (``auto`` or ``xie``) of a spec that ranks layers by nu, or None for one that names them."""
    rule = "" if spec is None else str(spec).strip().lower().partition(":")[0]
    return rule if rule in RANKED else None


def parse_layers(spec: str | Sequence[int] | None, *, num_layers: int) -> LayerSpec:
    """Parse a ``--layers`` value against a backbone of ``num_layers`` layers (see the module doc).

    Layers come back sorted, so a head's top layer (its residual, and Base's only input) is the
    highest one named, whatever the order in the spec.
    """
    L = int(num_layers)
    if isinstance(spec, (list, tuple)):  # layer ids as Python gives them: the same as the spec "1,2"
        if not spec:  # "" is the default (all): an empty list names no layer
            raise OptionError("no layers named (an empty list); name some, or leave layers out for all")
        spec = ",".join(str(x) for x in spec)
    text = "" if spec is None else str(spec).strip().lower()
    if text in ("", "all"):
        return LayerSpec(tuple(range(1, L + 1)))
    rule, k_text = ranking_rule(text), text.partition(":")[2]
    if rule:
        return LayerSpec(tuple(range(1, L + 1)), _ranked_k(spec, rule, k_text or RANKED[rule], L), rule)
    out: list[int] = []
    for part in text.split(","):
        for x in _ids(spec, re.sub(r"\bl\b", str(L), part.strip())):  # L alone, not inside "all" ('a66')
            if not 0 <= x <= L:
                raise OptionError(f"layer {x} in {spec!r} is out of range: valid layers are 0..{L} "
                                      f"(0 = embedding output, 1..{L} = transformer layers)")
            if x in out:
                raise OptionError(f"layer {x} is named twice in {spec!r}")
            out.append(x)
    return LayerSpec(tuple(sorted(out)))


def _ranked_k(spec: str, rule: str, k_text: str, L: int) -> int:
    try:
        k = int(k_text.strip())
    except ValueError:
        raise OptionError(f"bad layer spec {spec!r}: use {rule}:K with K an integer in 1..{L}") from None
    if not 1 <= k <= L:
        raise OptionError(f"{rule}:{k} is out of range: K must be in 1..{L} (the backbone's layers)")
    return k


def _ids(spec: str, part: str) -> list[int]:
    """One comma-separated part: ``3``, ``1..6`` or ``2-4``."""
    lo, sep, hi = part.partition("..") if ".." in part else part.partition("-")
    try:
        ids = list(range(int(lo), int(hi) + 1)) if sep and lo else [int(part)]
    except ValueError:
        raise OptionError(f"bad layer spec {spec!r} at {part!r}: use all, 4,8,12, 1..6, 0..L, auto:K or "
                              f"xie[:K]") from None
    if sep and lo and int(lo) > int(hi):
        raise OptionError(f"bad layer range {part!r} in {spec!r}: start is after end")
    return ids
