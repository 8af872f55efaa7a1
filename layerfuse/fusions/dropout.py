"""Dropout with a cheaper mask on CPU.

`nn.Dropout` draws one Bernoulli sample per element from torch's CPU generator (~10 ns each here),
which made dropout a third of the extra-layer head's step. This draws 64 random bits per four
elements from the same generator (so `torch.manual_seed` still fixes the masks) and keeps an
element when its 16 bits are at or above ``p * 65536``: the drop probability is ``p`` rounded to a
multiple of 1/65536 (0.1 -> 0.100006). On CUDA, and for ``p`` = 0 or outside training, it is
`nn.Dropout` itself.
"""

import torch
from torch import Tensor, nn


class Dropout(nn.Dropout):
    """`nn.Dropout` (same constructor, same state: none) with the 16-bit mask above on CPU."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0 or x.device.type != "cpu":
            return super().forward(x)
        return dropout(x, self.p)


def dropout(x: Tensor, p: float) -> Tensor:
    """Inverted dropout of ``x`` with drop probability ``p`` (rounded to 1/65536), for training."""
    if p >= 1:
        return x * 0
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_(-(2**63), None)  # 64 bits
    bits = words.view(torch.int16)[:n].view(x.shape)  # uniform on [-32768, 32767]
    keep = (bits >= _threshold(p)).to(x.dtype).mul_(1.0 / (1.0 - p))  # 0 or 1/(1-p)
    return x * keep


def _threshold(p: float) -> int:
    return -32768 + round(p * 65536)  # P(bits < threshold) = round(p * 65536) / 65536
