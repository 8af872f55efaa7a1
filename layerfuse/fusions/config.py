"""What a fusion head is built from, every default of a head written here once.

Each fusion declares only the fields it uses and gets just those (`FusionConfig.arguments_for`),
with its own settings (`Fusion.options`) from ``options``; `TokenTagger` and `FusedMaskedLM` take
the fields and the settings as keywords (a checkpoint's ``tagger`` record), and `TrainConfig` and
the command line read the defaults from this dataclass and the fusions' declarations. Torch-free.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields

from .options import takes_options

# Where z_L comes from: "fused" = the last fused layer; "top" = a slice of its own after the fused
# layers (a run puts the backbone's top layer there: `TrainConfig.query_layer`).
QUERY_LAYERS = ("fused", "top")
# An MLM head's LayerNorm epsilon and activation when the backbone's config names none: BERT's.
LM_LAYER_NORM_EPS = 1e-12
LM_HIDDEN_ACT = "gelu"


@takes_options
@dataclass(frozen=True)
class FusionConfig:
    n_layers: int  # L, the layers fused
    dim: int  # d, the backbone's width
    num_heads: int  # the backbone's attention heads (extra's layers copy them)
    ffn_dim: int  # the backbone's FFN width (extra's layers copy it)
    dropout: float = 0.1  # extra's layers and the dropout before a tagger's classifier
    query_layer: str = "fused"  # dwatt: z_L is the last fused layer (fused) or one more slice after them (top)
    # fusions' own settings (`Fusion.options`), (name, value) pairs: each also a keyword of the constructor;
    # a fusion's setting left out is its declared default
    options: tuple = ()

    def arguments_for(self, cls) -> dict:
        """The fields ``cls``'s constructor declares, by name, and its own settings, checked: a fusion
        gets what it uses, no more."""
        declared = inspect.signature(cls).parameters
        given = dict(self.options)
        return {**{f.name: getattr(self, f.name) for f in fields(self) if f.name in declared},
                **{option.name: option.value(given) for option in getattr(cls, "options", ())}}
