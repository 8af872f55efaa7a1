"""What a fusion head is built from, every default of a head written here once.

Each fusion declares only the fields it uses and gets just those (`FusionConfig.arguments_for`);
`TokenTagger` and `FusedMaskedLM` take the fields as keywords (a checkpoint's ``tagger`` record),
and `TrainConfig` and the command line read the defaults from this dataclass. Torch-free.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields

LAYER_SCORES = ("paper", "scaled", "learned")  # DWAtt's score s(q, k_n): see layerfuse.fusions.dwatt
# Where z_L comes from: "fused" = the last fused layer; "top" = a slice of its own after the fused
# layers (a run puts the backbone's top layer there: `TrainConfig.query_layer`).
QUERY_LAYERS = ("fused", "top")
# An MLM head's LayerNorm epsilon and activation when the backbone's config names none: BERT's.
LM_LAYER_NORM_EPS = 1e-12
LM_HIDDEN_ACT = "gelu"


@dataclass(frozen=True)
class FusionConfig:
    n_layers: int  # L, the layers fused
    dim: int  # d, the backbone's width
    num_heads: int  # the backbone's attention heads (extra's layers copy them)
    ffn_dim: int  # the backbone's FFN width (extra's layers copy it)
    extra_layers: int = 1  # extra: new encoder layers on top (None = this; training picks 1 or 2 by depth)
    layer_score: str = "scaled"  # dwatt: paper (q.k) | scaled (q.k / sqrt(d)) | learned (q.k * exp(t))
    dropout: float = 0.1  # extra's layers and the dropout before a tagger's classifier
    query_layer: str = "fused"  # dwatt: z_L is the last fused layer (fused) or one more slice after them (top)

    def __post_init__(self):
        if self.extra_layers is None:  # "the default", as a config or a caller leaves it
            object.__setattr__(self, "extra_layers", type(self).extra_layers)

    def arguments_for(self, cls) -> dict:
        """The fields ``cls``'s constructor declares, by name: a fusion gets what it uses, no more."""
        declared = inspect.signature(cls).parameters
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in declared}

