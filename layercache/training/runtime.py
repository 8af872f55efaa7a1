"""Where and how a run computes: device, precision (autocast), threads, honest timing."""

from __future__ import annotations

import contextlib
import os
import time

import torch


def pick_device(name: str | None = None) -> torch.device:
    """The named device, else cuda when present, else cpu."""
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_precision(precision: str, device: str | None = None) -> str:
    """``auto`` -> ``bf16`` where the hardware multiplies bfloat16 natively (a CUDA GPU that supports
    it, or a CPU with AMX tiles), else ``fp32``; other values pass through. Sweeps use it, so a grid
    states the precision it actually ran at."""
    if precision != "auto":
        return precision
    dev = pick_device(device)
    if dev.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if dev.type == "cpu" and _cpu_has_amx() else "fp32"


def _cpu_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return " amx_bf16" in f.read()
    except OSError:  # not Linux: stay with float32
        return False


def autocast(precision: str, device: torch.device):
    """The autocast context of a precision (fp32: none)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def apply_thread_setting() -> None:
    """``LAYERCACHE_NUM_THREADS`` sets torch's intra-op threads, for sweeps that run several
    processes side by side; unset, torch's default is left alone."""
    if os.environ.get("LAYERCACHE_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["LAYERCACHE_NUM_THREADS"]))


def now(device: torch.device) -> float:
    """Wall clock, after waiting for queued GPU work, so train and eval seconds are honest."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
