"""The forward-pass precisions, one table for extraction, training, fine-tuning and the CLI: each
``--precision`` name with the dtype autocast computes in (none for fp32) and whether the backward
pass scales the loss (fp16's narrow range would flush small gradients to zero).

``--precision auto`` (`auto_precision`): bf16 where this machine multiplies it clearly faster than
fp32, decided by measuring rather than by a list of CPU flags. The probe times a head-sized product
(``[2048, 384] x [384, 1536]``, the size of a DWAtt or FFN product in a training step) in float32
and in bfloat16, a fraction of a second, and picks bf16 when it takes at most `BF16_WINS` of the
float32 time: CPUs with AMX or AVX512-BF16 and recent GPUs pass, CPUs that emulate bf16 (AVX2) do
not. The decision is remembered per machine (CPU model, flags, torch version, device) in
``<cache root>/precision.json``, so it is measured once; delete the file to measure again, or pass
``--precision fp32|bf16`` to override it. Every run records the precision it actually ran at
(``config.precision``).

One module below extraction and training alike, so that both read the same table and neither
imports the other for it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import dataclass

import torch

from .device import synchronize
from .files import write_json


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


BF16_WINS = 0.7  # bf16 must take at most this fraction of fp32's time: a clear gain, not noise
SHAPE = (2048, 384, 1536)
FILE = "precision.json"


def auto_precision(device: torch.device, *, root: str | None = None) -> str:
    """``bf16`` or ``fp32`` for ``device``: remembered, else probed once and remembered."""
    from .errors import LayerfuseError

    try:
        path = os.path.join(_local_root(root), FILE)
    except LayerfuseError as exc:  # no home folder for the default root (a batch job's): measured, not remembered
        return _not_remembered(_measured(device), str(exc))
    key = machine_key(device)
    known = _read(path)
    if not _is_decision(known.get(key)):
        known[key] = _measured(device)
        try:
            _write(path, known)
        except OSError as exc:  # a read-only root (a colleague's): the run goes on, measured, as it would have
            return _not_remembered(known[key], f"{path}: {exc.strerror or exc}")
    return known[key]["precision"]


def _measured(device: torch.device) -> dict:
    """The decision for ``device`` from one measurement, with its timings."""
    fp32_s, bf16_s = time_products(device)
    return {"precision": "bf16" if bf16_s <= BF16_WINS * fp32_s else "fp32",
            "fp32_ms": round(1e3 * fp32_s, 3), "bf16_ms": round(1e3 * bf16_s, 3)}


def _not_remembered(decision: dict, why: str) -> str:
    """The precision measured, said not to be remembered (and why), for the run to go on with."""
    chosen = decision["precision"]
    sys.stderr.write(f"note: --precision auto measured {chosen} here, not remembered ({why}); --precision {chosen} "
                     "skips the measurement\n")
    return chosen


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
    from .cache.layout import cache_root, default_root, is_remote

    root = cache_root(root)
    return default_root() if is_remote(root) else root


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            known = json.load(f)
    except (OSError, ValueError):  # absent or damaged: measure again
        return {}
    return known if isinstance(known, dict) else {}  # JSON of another shape ([], null) is damaged too


def _is_decision(entry) -> bool:
    """Whether a machine's remembered entry holds a precision this module writes: an edited or truncated
    one (``{}``, another word) is measured again, as a file that is not JSON is, rather than a traceback."""
    return isinstance(entry, dict) and entry.get("precision") in PRECISIONS


def _write(path: str, known: dict) -> None:
    """Whole (never a half-written file, even with sweeps starting side by side), and on a full disk no
    temporary file left behind in the root."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json(path, known)


def _synced(device: torch.device) -> float:
    synchronize(device)  # any accelerator's queued products, not CUDA's alone
    return time.perf_counter()
