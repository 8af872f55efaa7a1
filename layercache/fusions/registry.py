"""The fusions by name: a plain dict, so a config or a checkpoint names its head with a string."""

from layercache.errors import LayercacheError

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


def build_fusion(fusion: str, *, n_layers: int, dim: int, **kwargs):
    """``FUSIONS[fusion](n_layers=..., dim=..., **kwargs)``, the name and shape checked first (the
    tagger and the masked LM build their fusion here)."""
    if fusion not in FUSIONS:
        raise LayercacheError(f"unknown fusion {fusion!r}; choose one of {sorted(FUSIONS)}")
    for name, value in (("n_layers", n_layers), ("dim", dim)):
        if value < 1:
            raise LayercacheError(f"{name} must be >= 1, got {value!r}")
    return FUSIONS[fusion](n_layers=n_layers, dim=dim, **kwargs)
