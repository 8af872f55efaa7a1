"""How much of the cache a run holds, read from the device it computes on, declared once.

A split (train sentences, dev, test) whose fused layers fit the budget is read once and held in the
storage dtype (float16, bfloat16, int8) **on the compute device**, and every run and pack of the
process shares it (`layerfuse.training.store`); a batch is gathered and widened there. A larger
split is streamed from the cache in blocks of ``BLOCK_ROWS`` rows (`layerfuse.training.arrays.SplitArrays`).

The budget is ``BUDGET_FRACTION`` of what the device has free when the data is loaded: on CUDA
``torch.cuda.mem_get_info`` (free bytes of the GPU), on a CPU the kernel's ``MemAvailable`` (within
the cgroup's limit, when there is one). ``LAYERFUSE_MEMORY_BUDGET`` (bytes, or with a K/M/G/T
suffix) sets it by hand. At roberta-large shape (24 layers x 1024, 48 KiB per word in float16)
CoNLL-2003 dev and test (51k and 46k words, 2.5 and 2.2 GB) are held on an 80 GB GPU and on a 24 GB
host with most of its memory free; the whole train split (203k words, 10 GB) is held on the GPU and
streams on the 24 GB host (half of ~22 GB available is 11 GB, less what dev and test already took).

Evaluation batches sentences within blocks of ``BLOCK_ROWS`` cache rows (length-sorted inside each
block), whether the split is held or streamed, so both give the same numbers bit for bit.
"""

from __future__ import annotations

import os
import re

MEMORY_BUDGET_BYTES: int | None = None  # None: read from the device (`memory_budget`); a number fixes it
BUDGET_FRACTION = 0.5  # of the device's free memory: the rest is for the heads, their batches and the system
BLOCK_ROWS = 8192  # cache rows per streamed block, and the span of one length-sorted evaluation group
SHUFFLE_WINDOW = 2  # streamed training: sentences are shuffled within this many consecutive blocks
EVAL_CACHE_SHARE = 0.25  # of the budget, for a held split's evaluation batches kept padded and widened
EVAL_FRACTION = 1 / 16  # of the GPU's free memory, for one evaluation batch widened to float32
EVAL_ROWS_PER_SENTENCE = 64  # what one sentence of an evaluation batch is allowed (padded rows)
ENV = "LAYERFUSE_MEMORY_BUDGET"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def memory_budget(device=None) -> int:
    """Bytes of cached hidden states a process may hold on ``device`` (None: the one runs pick)."""
    if MEMORY_BUDGET_BYTES is not None:
        return int(MEMORY_BUDGET_BYTES)
    if os.environ.get(ENV):
        return parse_bytes(os.environ[ENV])
    return int(BUDGET_FRACTION * free_bytes(device))


def eval_sentences(row_bytes: int, device) -> int:
    """Sentences per evaluation batch on a GPU: ``EVAL_FRACTION`` of its free memory over the bytes
    of ``EVAL_ROWS_PER_SENTENCE`` float32 rows, between 64 and 4096. At roberta-large shape (96 KiB
    a row over 24 layers) an H100 with 70 GB free takes 700 sentences a batch: dev in 5 batches."""
    room = EVAL_FRACTION * free_bytes(device) / max(1, row_bytes * EVAL_ROWS_PER_SENTENCE)
    return int(min(4096, max(64, room)))


def free_bytes(device=None) -> int:
    """Free memory of ``device``: the GPU's free bytes on CUDA, else the host's available bytes."""
    import torch

    from .runtime import pick_device

    device = pick_device() if device is None else torch.device(device)  # a run's device: checked when it was named
    if device.type == "cuda":  # a held split passes through host memory on its way to the GPU
        free, _total = torch.cuda.mem_get_info(device)
        return min(int(free), host_available_bytes())
    return host_available_bytes()


def host_available_bytes() -> int:
    """The kernel's MemAvailable, capped by the cgroup's memory limit when one is set; where
    neither can be read (not Linux), the physical memory."""
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if available is None:
        available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return min(available, _cgroup_room())


def _cgroup_room() -> int:
    """What the cgroup (v2) still lets this process allocate; unlimited where there is no limit."""
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read().strip())
    except (OSError, ValueError):
        return 1 << 62
    return 1 << 62 if limit == "max" else max(0, int(limit) - used)


def parse_bytes(text: str) -> int:
    """``"8G"`` -> 8 GiB; a plain number is bytes. A bad value names the variable and the value."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, flags=re.IGNORECASE)
    if not match:
        from ..errors import LayerfuseError

        raise LayerfuseError(f"{ENV}={text!r} is not a size: write bytes, or a number with K, M, G or T (e.g. 8G)")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])
