"""The fusions by name: a plain dict, so a config or a checkpoint names its head with a string.

Each entry is a `Fusion` subclass that declares what it can do (its forward, whether it is
token-wise, its stacked forward for packs, whether that runs on a shared evaluation batch, its
layer usage: the contract is in `layerfuse.fusions.fusion`); whoever needs one of those reads the
declaration. A new fusion is one class and one entry here.
"""

from layerfuse.errors import LayerfuseError

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


def owned_options() -> dict[str, set[str]]:
    """Each setting some fusion owns (`Fusion.options`) -> the fusions that read it."""
    owners: dict[str, set[str]] = {}
    for name, cls in FUSIONS.items():
        for option in cls.options:
            owners.setdefault(option, set()).add(name)
    return owners


def fusions_that_pack() -> list[str]:
    """The fusions whose K heads train as one module (``sweep --pack K``): those declaring a stacked forward."""
    return [name for name, cls in FUSIONS.items() if cls.packs()]


def build_fusion(fusion: str, config: FusionConfig):
    """``FUSIONS[fusion]`` built from the fields of ``config`` it declares, the name and shape
    checked first (the tagger and the masked LM build their fusion here)."""
    if fusion not in FUSIONS:
        raise LayerfuseError(f"unknown fusion {fusion!r}; choose one of {sorted(FUSIONS)}")
    for name in ("n_layers", "dim"):
        if getattr(config, name) < 1:
            raise LayerfuseError(f"{name} must be >= 1, got {getattr(config, name)!r}")
    cls = FUSIONS[fusion]
    return cls(**config.arguments_for(cls))
