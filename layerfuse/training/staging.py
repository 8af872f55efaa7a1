"""Streamed blocks on their way to a CUDA device: pinned host buffers allocated once, copies that
never make the step wait.

A block read from the cache is a pageable numpy array; copied to a GPU as it is, the copy is
synchronous (the driver stages it through a pinned buffer of its own, and the host waits). Here each
block's stored values are first copied into one of two pinned buffers that the process allocates
once (both grown together when a block is larger than any before, never shrunk), then sent to the
device with ``non_blocking`` on a copy stream of their own, from the read-ahead thread, while the
current block computes. The compute stream waits for that copy on the device (`ready`), not the
host. Before a buffer is refilled, the thread that refills it waits until its previous copy has left
(the read-ahead thread, never the step).
"""

from __future__ import annotations

import threading

import numpy as np


class PinnedStaging:
    """Two pinned host buffers taking turns (see the module's docstring); one per process."""

    def __init__(self) -> None:
        self._buffers: list = [None, None]
        self._copied: list = [None, None]  # the CUDA event recorded after each buffer's last copy
        self._turn = 0
        self._size = 0  # bytes each buffer holds: the largest block seen
        self._stream = None
        self._lock = threading.Lock()  # the read-ahead thread and the main thread may both read a block

    def to_device(self, array: np.ndarray, device):
        """``array`` on the CUDA ``device`` (same dtype and shape) and the event its copy records."""
        import torch

        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        with self._lock:
            i, self._turn = self._turn, self._turn ^ 1
            self._fit(raw.size)
            if self._copied[i] is not None:
                self._copied[i].synchronize()  # its last block has left the buffer
            buffer = self._buffers[i][: raw.size]
            buffer.numpy()[:] = raw
            if self._stream is None:
                self._stream = torch.cuda.Stream(device)
            with torch.cuda.stream(self._stream):
                out = buffer.to(device, non_blocking=True)
                copied = torch.cuda.Event()
                copied.record(self._stream)
            self._copied[i] = copied
        dtype = torch.from_numpy(np.empty(0, dtype=array.dtype)).dtype
        return out.view(dtype).reshape(array.shape), copied

    def _fit(self, nbytes: int) -> None:
        """Both buffers hold at least ``nbytes``. They grow together: which block lands in which buffer
        depends on whether the read-ahead thread or the step asked first, so a buffer sized by its own
        blocks alone would be allocated again on a later pass over the same blocks."""
        if nbytes <= self._size:
            return
        for k in (0, 1):
            if self._copied[k] is not None:
                self._copied[k].synchronize()  # its last block has left the buffer
        grown = [self._allocate(nbytes) for _ in (0, 1)]  # both, before either is kept: a failed one keeps the old
        self._buffers, self._size = grown, nbytes

    @staticmethod
    def _allocate(nbytes: int):
        import torch

        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


def ready(tensors, copied) -> None:
    """Make the current stream wait (on the device) for ``copied`` before it uses ``tensors``, and tell
    the allocator they are used there (their memory came from the copy stream)."""
    import torch

    stream = torch.cuda.current_stream()
    stream.wait_event(copied)
    for t in tensors:
        if t is not None:
            t.record_stream(stream)


_STAGING: list[PinnedStaging] = []


def release() -> None:
    """Let the staging buffers go (`store.clear`): they grow to the largest block staged and stay. Their
    pinned memory goes back to torch's cache of pinned blocks, still pinned: that cache is emptied too."""
    import torch

    _STAGING.clear()
    empty_cache = getattr(torch._C, "_host_emptyCache", None)  # torch's own call (torch.cuda.graphs), private
    if empty_cache is not None and torch.cuda.is_initialized():
        empty_cache()


def staging() -> PinnedStaging:
    """The process's staging buffers, made on first use."""
    if not _STAGING:
        _STAGING.append(PinnedStaging())
    return _STAGING[0]
