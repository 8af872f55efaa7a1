"""FT mode's partial freezing: the embeddings, or the embeddings and the bottom k layers."""

from __future__ import annotations

from ..errors import LayerfuseError, OptionError


def freeze(backbone, spec: str | int | None) -> int:
    """Freeze the embeddings ("embeddings") or the embeddings and the bottom k layers (k); returns
    the number of trainable backbone parameters left."""
    model = backbone.model
    if spec not in (None, "", "none", 0, "0"):
        k = 0 if str(spec) == "embeddings" else int(spec)
        layers = list(_layers(model))
        if k > len(layers):  # it froze them all in silence and trained nothing of the backbone
            raise OptionError(f"--freeze {spec}: the backbone has {len(layers)} layers")
        frozen = [model.embeddings] + layers[:k]
        for module in frozen:
            for p in module.parameters():
                p.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _layers(model):
    encoder = getattr(model, "encoder", None)
    layers = getattr(encoder, "layer", None) or getattr(encoder, "layers", None)
    if layers is None:
        raise LayerfuseError(f"cannot find the transformer layers of {type(model).__name__} to freeze")
    return layers
