"""Host arrays onto the compute device without making the host wait (imported by fusions and training)."""

from __future__ import annotations

import numpy as np
import torch


def to_device(array, device) -> torch.Tensor:
    """A host array (indices, lengths, a mask) as a tensor on ``device``; on CUDA copied from pinned
    memory without blocking, so the host never waits for the GPU to take it."""
    tensor = array if isinstance(array, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(array))
    if torch.device(device).type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)
