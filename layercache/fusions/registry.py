"""The fusions by name: a plain dict, so a config or a checkpoint names its head with a string."""

from layercache.errors import LayercacheError

from .base import Base
from .concat import Concat
from .config import FusionConfig
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


def build_fusion(fusion: str, config: FusionConfig):
    """``FUSIONS[fusion]`` built from the fields of ``config`` it declares, the name and shape
    checked first (the tagger and the masked LM build their fusion here)."""
    if fusion not in FUSIONS:
        raise LayercacheError(f"unknown fusion {fusion!r}; choose one of {sorted(FUSIONS)}")
    for name in ("n_layers", "dim"):
        if getattr(config, name) < 1:
            raise LayercacheError(f"{name} must be >= 1, got {getattr(config, name)!r}")
    cls = FUSIONS[fusion]
    return cls(**config.arguments_for(cls))
