"""The fusions by name: a plain dict, so a config or a checkpoint names its head with a string."""

from .base import Base
from .concat import Concat
from .dwatt import DWAtt
from .extra import ExtraLayers
from .scalarmix import ScalarMix

FUSIONS = {
    "base": Base,
    "concat": Concat,
    "dwatt": DWAtt,
    "extra": ExtraLayers,
    "scalarmix": ScalarMix,
}
