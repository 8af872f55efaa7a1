"""The processes of one extraction. Alone it is rank 0 of 1; under `torchrun` or `accelerate launch`
(which set RANK, WORLD_SIZE, LOCAL_RANK) every rank encodes its own share of the units and writes
its own shards, so no two ranks ever touch the same chunk; rank 0 creates and finalises the split."""

from __future__ import annotations

import os


class Ranks:
    def __init__(self):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if self.world > 1:
            import torch
            import torch.distributed as dist

            if not dist.is_initialized():
                dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def device(self, requested: str | None):
        import torch

        from ..device import named_device

        if requested:
            return named_device(requested)
        if torch.cuda.is_available():
            return torch.device("cuda", self.local_rank % torch.cuda.device_count())
        return torch.device("cpu")

    def share(self, units: list[int]) -> list[int]:
        """Round-robin over equal-sized units: balanced by rows (words), same view on every rank."""
        return units[self.rank :: self.world]
