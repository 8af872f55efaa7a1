"""Keep freed memory in the process, so training steps stop page-faulting.

A training step allocates and frees the same few-MB activations again and again. glibc's malloc
hands blocks that large back to the kernel when they are freed (mmap, or trimming the heap top), so
the next step faults every page in again and the kernel zeroes it: ~2,800 page faults per step
for the DWAtt and extra-layer heads on CPU, a fifth to a third of their step time. Raising the
mmap and trim thresholds keeps those blocks for reuse: no faults after the first steps. The price
is that the process keeps up to ``TRIM`` of freed heap instead of returning it.

Only glibc (Linux) has ``mallopt``; elsewhere, and with ``LAYERFUSE_KEEP_HEAP=0``, this does
nothing.
"""

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # from glibc's malloc.h
MMAP = 32 << 20  # blocks below this come from the heap: glibc's largest allowed threshold (64-bit)
TRIM = 1 << 30  # free heap kept at the top before any is returned to the kernel
TOP_PAD = 64 << 20  # grow the heap in steps this large (untouched pages cost nothing)

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Set the thresholds once per process; True when they are in force."""
    global _done
    if _done is None:
        _done = os.environ.get("LAYERFUSE_KEEP_HEAP", "1") != "0" and _mallopt()
    return _done


def _mallopt() -> bool:
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl without mallopt, Windows)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(option, value) == 1 for option, value in (
        (M_MMAP_THRESHOLD, MMAP), (M_TRIM_THRESHOLD, TRIM), (M_TOP_PAD, TOP_PAD)))
