"""The forward-pass precisions, one table for extraction, training, fine-tuning and the CLI: each
``--precision`` name with the dtype autocast computes in (none for fp32) and whether the backward
pass scales the loss (fp16's narrow range would flush small gradients to zero).

It sits with extraction, the lowest layer that runs a forward pass, so that training and
fine-tuning (above it) read the same table and extraction never imports training.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Precision:
    name: str  # the ``--precision`` value, recorded in entries and runs
    autocast_dtype: torch.dtype | None  # None: no autocast, everything in float32
    scales_loss: bool = False  # fp16 training multiplies the loss (torch.amp.GradScaler)

    def autocast(self, device_type: str):
        """The autocast context of this precision on a device of ``device_type`` (fp32: none)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=self.autocast_dtype)


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("fp32", None),
    Precision("bf16", torch.bfloat16),
    Precision("fp16", torch.float16, scales_loss=True),
)}
DEFAULT_PRECISION = "fp32"


def precision_of(name: str) -> Precision:
    """The precision called ``name``."""
    try:
        return PRECISIONS[name]
    except KeyError:
        raise ValueError(f"precision {name!r} is not one of {', '.join(PRECISIONS)}") from None


def autocast(name: str, device: torch.device):
    """The autocast context of precision ``name`` on ``device`` (fp32: none)."""
    return precision_of(name).autocast(device.type)
