"""Fusion heads: each maps hidden states ``[B, T, L, d]`` (+ mask ``[B, T]``) to ``[B, T, d]``."""

from layercache.heads.base import Base
from layercache.heads.concat import Concat
from layercache.heads.dwatt import DWAtt
from layercache.heads.extra import ExtraLayers
from layercache.heads.scalarmix import ScalarMix

FUSIONS = {
    "base": Base,
    "concat": Concat,
    "dwatt": DWAtt,
    "extra": ExtraLayers,
    "scalarmix": ScalarMix,
}

# Imported after FUSIONS is defined: tagger.py looks fusions up in it.
from layercache.heads.tagger import TokenTagger, count_parameters, parameter_budget  # noqa: E402

__all__ = [
    "FUSIONS",
    "Base",
    "Concat",
    "DWAtt",
    "ExtraLayers",
    "ScalarMix",
    "TokenTagger",
    "count_parameters",
    "parameter_budget",
]
