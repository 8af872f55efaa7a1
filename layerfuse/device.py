"""A device named by the user (``--device``), checked before anything loads onto it: both stages ask here,
so `extract` and `train-head` refuse a device this machine lacks in the same one line."""

from __future__ import annotations

import torch

from .errors import LayerfuseError, OptionError


def named_device(name: str) -> torch.device:
    """``torch.device(name)``, or one line saying why this machine cannot run on it (a typo, no CUDA in
    this torch or on this machine, an index past the GPUs there are)."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise OptionError(f"--device {name!r} is not a device: use cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not count:
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no GPU is visible"
            raise LayerfuseError(f"--device {name}: {why}; use --device cpu (or leave --device out)")
        if device.index is not None and device.index >= count:
            raise LayerfuseError(f"--device {name}: this machine has {count} GPU{'s' * (count != 1)} "
                                 f"(cuda:0..cuda:{count - 1})")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise LayerfuseError(f"--device {name}: MPS is not available here; use --device cpu")
    return device


NO_FLOAT64 = frozenset({"mps"})  # device types without float64: torch refuses to make such a tensor there


def accumulator_dtype(device) -> torch.dtype:
    """The dtype a sum kept on ``device`` over a whole split (a loss, a layer's share) accumulates in:
    float64 where the device has it, so the sum drifts no more than on the host; float32 on MPS, whose
    lack of float64 is permanent (torch raises "Cannot convert a MPS Tensor to float64 dtype")."""
    return torch.float32 if torch.device(device).type in NO_FLOAT64 else torch.float64


def synchronize(device) -> None:
    """Waits for the work queued on ``device``, so that a clock read next counts it, on any accelerator
    (CUDA, MPS, XPU); the host and meta devices queue nothing."""
    device = torch.device(device)
    if device.type in ("cpu", "meta"):
        return
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif hasattr(torch, "accelerator") and hasattr(torch.accelerator, "synchronize"):  # torch >= 2.6
        torch.accelerator.synchronize(device)
    else:  # torch 2.4-2.5: the backend's own module (torch.mps, torch.xpu)
        getattr(torch, device.type).synchronize()
