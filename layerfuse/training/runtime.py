"""Where and how a run computes: device, precision (autocast), threads, honest timing."""

from __future__ import annotations

import os
import time

import torch

from ..device import named_device, synchronize


def pick_device(name: str | None = None) -> torch.device:
    """The named device, else cuda when present, else cpu."""
    if name:
        return named_device(str(name))
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_precision(precision: str, device: str | None = None, *, root: str | None = None) -> str:
    """``auto`` -> ``bf16`` or ``fp32``, whichever this machine runs a head's products faster in
    (measured once and remembered: `layerfuse.precision`); other values pass through."""
    if precision != "auto":
        return precision
    from ..precision import auto_precision

    dev = pick_device(device)
    if dev.type not in ("cpu", "cuda") or (dev.type == "cuda" and not torch.cuda.is_bf16_supported()):
        return "fp32"
    return auto_precision(dev, root=root)


def autocast(precision: str, device: torch.device):
    """The autocast context of a precision (fp32: none), from the one table (`layerfuse.precision`)."""
    from ..precision import autocast as precision_autocast

    return precision_autocast(precision, device)


RUN_THREADS = 1  # intra-op threads of each run of a sweep, unless LAYERFUSE_NUM_THREADS says otherwise


def run_threads() -> int:
    """The intra-op threads every run of a sweep uses, whatever its worker count: a float sum's order, and so
    a run's numbers, may depend on the thread count, and a run must depend on its config and seed alone."""
    return int(os.environ.get("LAYERFUSE_NUM_THREADS") or RUN_THREADS)


def apply_thread_setting() -> None:
    """``LAYERFUSE_NUM_THREADS`` sets torch's intra-op threads, for sweeps that run several
    processes side by side; unset, torch's default is left alone."""
    if os.environ.get("LAYERFUSE_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["LAYERFUSE_NUM_THREADS"]))


def now(device: torch.device) -> float:
    """Wall clock, after waiting for the work queued on the device (CUDA, MPS, ...), so train and eval
    seconds are honest."""
    synchronize(device)
    return time.perf_counter()
