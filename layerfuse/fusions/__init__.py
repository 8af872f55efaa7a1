"""Fusion heads: each maps hidden states ``[B, T, L, d]`` (+ mask ``[B, T]``) to ``[B, T, d]``.

Every fusion is a `Fusion` and declares what it can do (`layerfuse.fusions.fusion` states the
contract); `FUSIONS` names them.

Imports torch and nothing of the project above `layerfuse.errors`.
"""

from .base import Base
from .concat import Concat
from .config import FusionConfig
from .dwatt import DWAtt
from .extra import ExtraLayers
from .fusion import Fusion
from .masked_lm import FusedMaskedLM, MaskedLMHead, masked_lm_budget
from .options import Option, Style
from .registry import FUSIONS
from .scalarmix import ScalarMix
from .tagger import TokenTagger, count_parameters, packable, parameter_budget

__all__ = [
    "FUSIONS",
    "Base",
    "Concat",
    "DWAtt",
    "ExtraLayers",
    "Fusion",
    "FusionConfig",
    "FusedMaskedLM",
    "MaskedLMHead",
    "Option",
    "ScalarMix",
    "Style",
    "TokenTagger",
    "count_parameters",
    "masked_lm_budget",
    "packable",
    "parameter_budget",
]
