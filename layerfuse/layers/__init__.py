"""Which layers to fuse: the one layer-spec parser, the variability score nu, per-layer scores."""

from .spec import LayerSpec, parse_layers
from .variability import layer_variability, pick_layers, rank_layers, subsample_per_class

__all__ = ["LayerSpec", "parse_layers", "layer_variability", "pick_layers", "rank_layers", "subsample_per_class"]
