"""The fusions by name: a dict, so a config or a checkpoint names its head with a string.

Each entry is a `Fusion` subclass that declares what it can do (its forward, whether it is
token-wise, its stacked forward for packs, whether that runs on a shared evaluation batch, its
layer usage, its own settings: the contract is in `layerfuse.fusions.fusion`); whoever needs one of
those reads the declaration. A new fusion is one class and one entry here; a new setting of a fusion
is one `Option` in its class.
"""

from layerfuse.errors import LayerfuseError, OptionError

from .base import Base
from .concat import Concat
from .config import FusionConfig
from .dwatt import DWAtt
from .extra import ExtraLayers
from .options import Option
from .scalarmix import ScalarMix


class Registry(dict):
    """The fusions by name, refusing in one line what would make a run's name lie: a built-in name taken
    by another class (its runs, named by the fusion's name, would read the built-in's results as its own),
    and an option named as another fusion's but declared otherwise (checked against the other's values)."""

    def __setitem__(self, name: str, cls) -> None:
        if BUILT_IN.get(name, cls) is not cls:
            raise LayerfuseError(f"fusion {name!r} is built in: register {cls.__name__} under another name (runs "
                                 "are named by their fusion's name, so the built-in's results would read as its)")
        for option in getattr(cls, "options", ()):
            for other_name, other in self.items():
                theirs = next((o for o in other.options if o.name == option.name), None)
                if other_name != name and theirs is not None and theirs != option:
                    raise LayerfuseError(f"{cls.__name__} declares an option {option.name!r} that {other_name} "
                                         "declares otherwise: name it apart, or reuse that Option")
        super().__setitem__(name, cls)


BUILT_IN = {
    "base": Base,
    "concat": Concat,
    "dwatt": DWAtt,
    "extra": ExtraLayers,
    "scalarmix": ScalarMix,
}
FUSIONS = Registry(BUILT_IN)


# The head `train-head` trains and the heads `sweep` compares when none is named: the paper's method,
# its strongest alternative, and its deeper baseline.
DEFAULT_FUSION = "dwatt"
DEFAULT_SWEEP_FUSIONS = ("dwatt", "concat", "extra")


def owned_options() -> dict[str, set[str]]:
    """Each setting some fusion owns (`Fusion.options`) -> the fusions that read it."""
    owners: dict[str, set[str]] = {}
    for name, cls in FUSIONS.items():
        for option in cls.options:
            owners.setdefault(option.name, set()).add(name)
    return owners


def declared_options() -> dict[str, Option]:
    """Each setting some fusion owns, by name -> its declaration (the first fusion's to declare it)."""
    declared: dict[str, Option] = {}
    for cls in FUSIONS.values():
        for option in cls.options:
            declared.setdefault(option.name, option)
    return declared


def check_option_names(names) -> None:
    """Each of ``names`` must be a setting some fusion owns."""
    unknown = sorted(set(names) - set(declared_options()))
    if unknown:
        raise OptionError(f"unknown fusion option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                          f"the fusions' options are {', '.join(sorted(declared_options())) or 'none'}")


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
    check_option_names(name for name, _ in config.options)
    cls = FUSIONS[fusion]
    return cls(**config.arguments_for(cls))
