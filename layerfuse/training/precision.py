"""``--precision auto``: bf16 where this machine multiplies it clearly faster than fp32, decided by
measuring rather than by a list of CPU flags.

The probe times a head-sized product (``[2048, 384] x [384, 1536]``, the size of a DWAtt or FFN
product in a training step) in float32 and in bfloat16, a fraction of a second, and picks bf16 when
it takes at most `BF16_WINS` of the float32 time: CPUs with AMX or AVX512-BF16 and recent GPUs
pass, CPUs that emulate bf16 (AVX2) do not. The decision is remembered per machine (CPU model,
flags, torch version, device) in ``<cache root>/precision.json``, so it is measured once; delete
the file to measure again, or pass ``--precision fp32|bf16`` to override it. Every run records the
precision it actually ran at (``config.precision``).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time

import torch

BF16_WINS = 0.7  # bf16 must take at most this fraction of fp32's time: a clear gain, not noise
SHAPE = (2048, 384, 1536)
FILE = "precision.json"


def auto_precision(device: torch.device, *, root: str | None = None) -> str:
    """``bf16`` or ``fp32`` for ``device``: remembered, else probed once and remembered."""
    path = os.path.join(_local_root(root), FILE)
    key = machine_key(device)
    known = _read(path)
    if key not in known:
        fp32_s, bf16_s = time_products(device)
        known[key] = {"precision": "bf16" if bf16_s <= BF16_WINS * fp32_s else "fp32",
                      "fp32_ms": round(1e3 * fp32_s, 3), "bf16_ms": round(1e3 * bf16_s, 3)}
        _write(path, known)
    return known[key]["precision"]


def time_products(device: torch.device, *, repeats: int = 5) -> tuple[float, float]:
    """Median seconds of one ``SHAPE`` product in float32 and in bfloat16 on ``device``."""
    m, k, n = SHAPE
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        a @ b  # the first call builds the kernel
        times = []
        for _ in range(repeats):
            t0 = _synced(device)
            a @ b
            times.append(_synced(device) - t0)
        out.append(sorted(times)[len(times) // 2])
    return out[0], out[1]


def machine_key(device: torch.device) -> str:
    """What the decision depends on: the device's model and features, and torch's version."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = platform.processor() + _cpu_model_and_flags()
    return hashlib.sha1(f"{device.type}|{name}|{torch.__version__}".encode()).hexdigest()[:16]


def _cpu_model_and_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:  # not Linux: the processor name alone
        return ""
    wanted = ("model name", "flags")
    return "|".join(next((text for text in lines if text.startswith(w)), "") for w in wanted)


def _local_root(root: str | None) -> str:
    from ..cache.layout import cache_root, is_remote

    root = cache_root(root)
    return os.path.join(os.path.expanduser("~"), ".cache", "layerfuse") if is_remote(root) else root


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):  # absent or damaged: measure again
        return {}


def _write(path: str, known: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(known, f, indent=2)
    os.replace(tmp, path)  # never a half-written file, even with sweeps starting side by side


def _synced(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
