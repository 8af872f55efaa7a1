"""Linear probes on cached token vectors (Tenney et al. 2019; Hewitt and Liang 2019).

Two probes, both one linear map d -> C under softmax cross-entropy, so that a score says what a
*linear* read-out finds in the vectors rather than what a probe of its own could compute:

- `LinearProbe`: the vectors of one layer.
- `ScalarMixProbe`: Tenney's scalar mix of layers 0..L, ``gamma * sum_l softmax(w)_l x_l``, then the
  linear map; the learned ``softmax(w)`` says which layers the task draws on.

Every feature is standardised with the train tokens' mean and standard deviation (per layer for the
mix). A linear probe can absorb that affine map, so nothing is gained or lost in capacity, but with a
fixed number of Adam steps the layers train alike whatever their scale (a BERT's upper layers have a
few huge dimensions), and the mixing weights compare layers rather than their norms.

Training is fixed in advance (`ProbeConfig`): minibatch Adam at a constant rate for a set number of
epochs, at least `min_steps` updates (an N-shot sample of a few hundred tokens would otherwise see a
handful), weights starting at zero (the problem is convex in the linear map: the start only has to be
the same for every run). Nothing is chosen on dev or test.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..cache.label_sets import SPAN
from ..errors import LayerfuseError, OptionError
from ..training.metrics import Chunker, entity_f1, token_accuracy

ON_DEVICE_BYTES = 4 << 30  # train vectors up to this size move to an accelerator once, not batch by batch


@dataclass(frozen=True)
class ProbeConfig:
    """How every probe of a run is trained; its fields go into each record, and a rerun resumes only
    records made with the same values."""

    epochs: int = 10  # passes over the train tokens
    lr: float = 1e-3  # Adam's learning rate, constant
    batch_size: int = 256  # tokens per update
    min_steps: int = 1000  # updates at least, whatever the epochs give (an N-shot sample is a few batches)
    weight_decay: float = 0.0  # AdamW's decoupled decay (0: plain Adam)
    max_train_tokens: int | None = None  # a seeded random subsample of the train tokens, to bound memory
    max_per_class: int = 2000  # tokens per class for the variability nu (as rank-layers)

    def __post_init__(self):
        for name in ("epochs", "batch_size", "min_steps", "max_per_class"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (0 if name in ("epochs", "min_steps") else 1):
                raise OptionError(f"ProbeConfig.{name} = {value!r} is not a valid count")
        if not (_is_number(self.lr) and self.lr > 0 and math.isfinite(self.lr)):
            raise OptionError(f"ProbeConfig.lr = {self.lr!r} must be a finite number > 0")
        if not (_is_number(self.weight_decay) and 0 <= self.weight_decay < math.inf):
            raise OptionError(f"ProbeConfig.weight_decay = {self.weight_decay!r} must be a finite number >= 0")
        if self.max_train_tokens is not None and self.max_train_tokens < 1:
            raise OptionError(f"ProbeConfig.max_train_tokens = {self.max_train_tokens!r} must be >= 1 or None")

    def record(self) -> dict:
        return asdict(self)

    def steps(self, n_tokens: int) -> int:
        """Updates for ``n_tokens`` train tokens: ``epochs`` passes, at least ``min_steps``."""
        return max(self.epochs * math.ceil(n_tokens / self.batch_size), self.min_steps) if n_tokens else 0


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _stats(x: torch.Tensor, *, elements: int = 1 << 24) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation over the first axis, summed in float64 chunks of about ``elements``
    values (128 MB), so that x (float16 [n, L + 1, d] for the mix) is never widened whole."""
    total = torch.zeros(x.shape[1:], dtype=torch.float64)
    squares = torch.zeros(x.shape[1:], dtype=torch.float64)
    chunk = max(1, elements // max(1, x[0].numel())) if x.shape[0] else 1
    for lo in range(0, x.shape[0], chunk):
        part = x[lo:lo + chunk].double()
        total += part.sum(0)
        squares += (part * part).sum(0)
    n = max(x.shape[0], 1)
    mean = total / n
    std = (squares / n - mean * mean).clamp_min(0).sqrt()
    return mean.float(), torch.where(std > 1e-6, std, torch.ones_like(std)).float()


def _zero_linear(dim: int, n_classes: int) -> nn.Linear:
    """The read-out d -> C, starting at zero: the same start for every run (the problem is convex in it)."""
    linear = nn.Linear(dim, n_classes)
    nn.init.zeros_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


class LinearProbe(nn.Module):
    """softmax(W standardise(x) + b) over one layer's vectors ``x`` [B, d]."""

    def __init__(self, dim: int, n_classes: int, *, mean: torch.Tensor | None = None, std: torch.Tensor | None = None):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim) if mean is None else mean.float())
        self.register_buffer("std", torch.ones(dim) if std is None else std.float())
        self.linear = _zero_linear(dim, n_classes)

    @classmethod
    def for_data(cls, x: torch.Tensor, n_classes: int) -> LinearProbe:
        """A probe standardising with the statistics of the train vectors ``x`` [n, d]."""
        mean, std = _stats(x)
        return cls(x.shape[1], n_classes, mean=mean, std=std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear((x.float() - self.mean) / self.std)


class ScalarMixProbe(nn.Module):
    """softmax(W gamma sum_l softmax(w)_l standardise_l(x_l) + b) over all layers ``x`` [B, L + 1, d]."""

    def __init__(self, n_layers: int, dim: int, n_classes: int, *, mean: torch.Tensor | None = None,
                 std: torch.Tensor | None = None):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n_layers, dim) if mean is None else mean.float())
        self.register_buffer("std", torch.ones(n_layers, dim) if std is None else std.float())
        self.w = nn.Parameter(torch.zeros(n_layers))  # uniform mix to start
        self.gamma = nn.Parameter(torch.ones(()))
        self.linear = _zero_linear(dim, n_classes)

    @classmethod
    def for_data(cls, x: torch.Tensor, n_classes: int) -> ScalarMixProbe:
        """A probe standardising each layer with the statistics of the train vectors ``x`` [n, L + 1, d]."""
        mean, std = _stats(x)
        return cls(x.shape[1], x.shape[2], n_classes, mean=mean, std=std)

    def weights(self) -> list[float]:
        """softmax(w): the share of each layer 0..L in the mix."""
        return torch.softmax(self.w.detach().float(), 0).cpu().tolist()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x.float() - self.mean) / self.std  # [B, L + 1, d]; a float16 batch is widened here only
        mixed = self.gamma * torch.einsum("l,bld->bd", torch.softmax(self.w, 0), x)
        return self.linear(mixed)


def train_probe(probe: nn.Module, x: torch.Tensor, y: torch.Tensor, *, config: ProbeConfig, seed: int,
                device: torch.device | str = "cpu") -> nn.Module:
    """Fit ``probe`` to vectors ``x`` [n, ...] (kept where they are; each batch is moved to ``device``
    and widened to float32 there) and labels ``y`` [n] (class ids 0..C-1). ``seed`` fixes the batch order."""
    if x.shape[0] != y.shape[0]:
        raise LayerfuseError(f"{x.shape[0]} train vectors but {y.shape[0]} labels")
    n_classes = probe.linear.out_features
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= n_classes):
        raise LayerfuseError(f"train labels span {int(y.min())}..{int(y.max())}, outside 0..{n_classes - 1}")
    device = torch.device(device)
    probe.to(device).train()
    if device.type != "cpu" and x.numel() * x.element_size() <= ON_DEVICE_BYTES:
        x = x.to(device)  # one copy, not one per batch
    y = y.to(x.device)
    optimizer = torch.optim.AdamW(probe.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(int(seed))
    n, steps = x.shape[0], config.steps(x.shape[0])
    order = torch.empty(0, dtype=torch.int64)
    for _ in range(steps):
        if order.numel() < config.batch_size:  # the next epoch's order is drawn only when needed
            order = torch.cat([order, torch.randperm(n, generator=generator)])
        batch, order = order[:config.batch_size].to(x.device), order[config.batch_size:]
        logits = probe(x[batch].to(device, non_blocking=True))
        loss = F.cross_entropy(logits, y[batch].to(device, non_blocking=True))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    # A diverged probe's scores are no result (and its record, with nan in it, was not JSON): one line.
    if not all(bool(torch.isfinite(p).all()) for p in probe.parameters()):
        raise LayerfuseError(f"a probe diverged (its weights are not finite) at learning rate {config.lr:g}: "
                             "lower --lr")
    return probe.eval()


@torch.inference_mode()
def predict(probe: nn.Module, x: torch.Tensor, *, device: torch.device | str = "cpu",
            batch_size: int = 4096) -> np.ndarray:
    """Class ids (int64 [n]) the probe gives the vectors ``x`` [n, ...]."""
    probe.eval()
    out = [probe(x[lo:lo + batch_size].to(device)).argmax(-1).cpu() for lo in range(0, x.shape[0], batch_size)]
    return torch.cat(out).numpy().astype(np.int64) if out else np.zeros(0, dtype=np.int64)


def score(gold: np.ndarray, pred: np.ndarray, *, kind: str, label_names=None, counts: np.ndarray | None = None,
          chunker: Chunker | None = None) -> dict:
    """``{"acc": token accuracy}`` for every set; a span set with its ``label_names`` (or a ``chunker``)
    and the scored tokens per sentence (``counts``) adds ``"f1"``, conlleval's span F1."""
    out = {"acc": token_accuracy(gold, pred)}
    if kind == SPAN and counts is not None:
        chunker = chunker or Chunker(label_names)
        out["f1"] = entity_f1(chunker(np.asarray(gold), counts), chunker(np.asarray(pred), counts))
    return out
