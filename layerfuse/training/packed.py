"""Training a pack of heads at once: `train_pack(configs, data) -> [RunResult]` trains K runs that
differ in seed, N, learning rate or epoch cap (`OWN`) as one stacked module (``sweep --pack K``),
through the loop every run goes through (`loop.train_runs`), with `Stacked` as its heads.

A few-shot head is tiny, so one run's step is mostly per-call overhead; K heads in one call share it.
Each head keeps its own schedule: the loop steps while any head has steps left, each head on its own
next batch, until its own last step, and scores dev at its own evaluation points (`PackOptimizer`
gives each head its rate and schedule; heads on one schedule share one AdamW over the stacks). Each
head gets its solo gradient, provided the loss is each head's own mean (summed over heads) and the
gradient is clipped per head, by that head's global norm, as `clip_grad_norm_` does for a solo run.
Each head is built by `prepare_run`, exactly as its solo run (its sample, its seeded initialisation,
its batch order), then stacked (`torch.func.stack_module_state`) into two flat ``[K, P]`` leaves,
AdamW's two groups, every weight a view of one: a step casts, clips and updates two tensors, not
two per weight. At each step each head gets its own batch, all gathered at once (`PackRows`) in
one ``[K, 1, R]`` packed shape (padding rows are zeros, their labels IGNORE: token-wise heads
never see them, and the extra-layer head attends within each head's sentences, from their lengths).
On a GPU, where a few-shot step is bound by launching kernels, K heads then step in far less
than K single steps. The fusion runs as `layerfuse.fusions.stacked` writes it: each
product batched over the K heads. The dropouts run on stacked ``[K, ...]`` tensors, so each head
draws its own masks, from the global RNG in one draw rather than its solo sequence: with dropout a
packed head is a different, equally valid, draw of its run; without dropout it matches its solo run
up to floating-point summation order. Every dev (and test) batch is built once and every head due is scored on it.

Packs: FE runs of a tagging task (the pack stacks `TokenTagger`s) of a fusion with a stacked
forward (`Fusion.packs`), one micro-batch per step (grad_accum 1), fixed layers (auto:K
picks layers per seed) and no fp16 loss scaling; anything else runs alone (`train_head`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import LayerfuseError
from ..fusions import FUSIONS, TokenTagger
from ..fusions.registry import fusions_that_pack
from ..fusions.stacked import compute_dtype, linear, stacked, under
from ..precision import precision_of
from ..transfer import to_device
from .arrays import IGNORE, SplitArrays
from .config import RunResult, TrainConfig
from .loop import (
    PACK_MULTIPLE,
    Run,
    build_optimizer,
    decays_weight,
    lr_schedule,
    prepare_process,
    prepare_run,
    train_runs,
)
from .pack_batches import PackRows
from .tasks import head_class


def can_pack(config: TrainConfig) -> bool:
    """Whether ``config`` may train in a pack (see the module's docstring for why the others may not)."""
    return (config.mode == "fe" and head_class(config) is TokenTagger
            and FUSIONS[config.fusion].packs() and config.grad_accum == 1
            and not precision_of(config.precision).scales_loss
            and not str(config.layers or "").startswith("auto"))


def pack_key(config: TrainConfig) -> TrainConfig:
    """What the runs of one pack share: every field but those each head keeps for itself (`OWN`)."""
    return replace(config, **OWN)


# The fields a head keeps for itself (its sample, initialisation, order, rate and schedule), each
# with the value that stands for all of them in `pack_key`.
OWN = {"seed": 0, "shots": None, "lr": None, "epochs": 0}


def train_pack(configs: list[TrainConfig], data, *, log=None, keep_head: bool = False,
               keep_tagger: bool | None = None) -> list[RunResult]:
    """Train ``configs`` (the same run but for `OWN`) together, as one stacked module (a pack of one
    too: its numbers are its solo run's, dropout off); one `RunResult` per config, in order, as
    `train_head` would report it, but ``seconds``: the pack's, divided by K, with ``pack`` = K.
    ``keep_tagger`` is the former name of ``keep_head`` and still accepted."""
    if keep_tagger is not None:
        keep_head = keep_tagger
    _check(configs)
    t_start = time.perf_counter()
    prepare_process()
    # Each seeded and built as its solo run; the runs of one seed (they differ only in `OWN`) share
    # one initialisation, built once.
    built: dict = {}
    runs = [prepare_run(config, data, built=built) for config in configs]
    # Longest first, a schedule's runs side by side: the heads still training are always the first
    # ones (a slice of the stacks, no gather) and each schedule a slice of the leaves (`PackOptimizer`).
    placed = sorted(range(len(runs)), key=lambda i: (-runs[i].total_steps, _schedule(runs[i]), i))
    runs = [runs[i] for i in placed]
    if len({r.layers for r in runs}) > 1:
        raise LayerfuseError("the runs of a pack must fuse the same layers")
    trained = train_runs(runs, Stacked(runs), t_start=t_start, keep_head=keep_head,
                         logs=[_prefixed(log, r.config) for r in runs])
    results = [None] * len(runs)
    for i, result in zip(placed, trained):
        result.seconds["pack"] = len(runs)
        results[i] = result  # in the order of ``configs``
    return results


class Stacked:
    """The loop's heads for a pack (`loop.Heads`): the runs' heads stacked as one module (`Pack`),
    each at its own rate and schedule (`PackOptimizer`), each dev (and test) batch built once and
    every head due scored on it (on the lead run's split: the same sentences for all)."""

    def __init__(self, runs: list[Run]):
        self.runs = runs
        self.pack = Pack([r.head for r in runs], [r.train for r in runs])
        self.optimizer = PackOptimizer(self.pack, runs)

    def train(self, mode: bool) -> None:
        self.pack.train(mode)

    def step(self, heads: list[int], orders: list[np.ndarray]) -> torch.Tensor:
        return self.pack.step([self.runs[k] for k in heads], orders, heads=heads, optimizer=self.optimizer)

    def evaluate(self, heads: list[int]) -> list[dict]:
        lead = self.runs[0]
        return _scores(lead, lambda h, m: self.pack.logits(h, m, shared=True, heads=heads), len(heads), lead.dev)

    def state(self, k: int) -> dict:
        return self.pack.state(k)

    def test_at_best(self, heads: list[int]) -> list[dict]:
        """All of ``heads`` on each test batch at once, stacked again from their restored modules."""
        lead = self.runs[0]
        best = Pack([self.runs[k].head for k in heads])
        best.train(False)
        return _scores(lead, lambda h, m: best.logits(h, m, shared=True), best.k, lead.test)


def _scores(lead: Run, forward, n_heads: int, split) -> list[dict]:
    """The task's scores of the ``n_heads`` heads whose stacked logits ``forward`` computes, on ``split``."""
    return lead.task.score_heads(forward, n_heads, split, data=lead.data, device=lead.device,
                                 batch_size=lead.eval_batch_size, autocast=lead.autocast(),
                                 token_wise=lead.head.fusion.token_wise)


class PackOptimizer:
    """AdamW over a pack's stacked parameters, each head at its own rate and schedule.

    The heads on one schedule (the same rate, steps and warmup: runs that differ in seed alone) are
    side by side in the stacks (`train_pack` orders them so), and share one fused AdamW group per
    leaf over their slice of it (Adam is element-wise, so each head gets its solo update): one
    schedule, as a grid's trials, is two groups; a Figure-3 cell of four caps is eight, not two a
    head. A schedule past its last step gets no gradient, so AdamW leaves its heads and their
    moments alone, as their solo runs would have ended there."""

    def __init__(self, pack: Pack, runs: list[Run]):
        lead = runs[0]
        self.pack = pack
        self.spans = _spans([_schedule(r) for r in runs])  # [(first, end)] of each schedule's heads
        self.shared = len(self.spans) == 1
        if self.shared:
            self.optimizer, self.scheduler = build_optimizer(lead.config, lead.head, total_steps=lead.total_steps,
                                                             groups=pack.param_groups(lead.config))
            return
        self.slices = [{group: t.detach()[a:b] for group, t in pack.flat.items()} for a, b in self.spans]
        firsts = [runs[a] for a, _ in self.spans]
        groups = [g for r, own in zip(firsts, self.slices) for g in pack.param_groups(r.config, own)]
        schedules = [lr_schedule(r.config, r.total_steps) for r in firsts for _ in pack.flat]  # a schedule's groups
        self.optimizer = torch.optim.AdamW(groups, lr=lead.config.max_lr, fused=True)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedules)

    def zero_grad(self) -> None:
        for t in self.pack.flat.values():
            t.grad = None

    def step(self, heads: list[int]) -> None:
        """One AdamW step of ``heads`` (the pack's gradients are in the stacks), then the schedule's."""
        if not self.shared:
            for (a, _), own in zip(self.spans, self.slices):
                for group, t in own.items():
                    grad = self.pack.flat[group].grad
                    t.grad = grad[a:a + len(t)] if a in heads and grad is not None else None
        self.optimizer.step()
        self.scheduler.step()


def _schedule(run: Run) -> tuple:
    """What a head's updates depend on besides its gradients: its rate, steps and warmup."""
    return run.total_steps, run.config.max_lr, run.config.warmup


def _spans(keys: list) -> list[tuple[int, int]]:
    """``(first, end)`` of each run of equal neighbours in ``keys``; a key seen again after another
    starts a span of its own (still correct: one group a span)."""
    spans, first = [], 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[first]:
            spans.append((first, i))
            first = i
    return spans


# Whether a bf16 pack step keeps its weights' gradients narrow and widens them while clipping
# (`Pack.narrow_weights`), by device type. It moves 8 bytes a weight where casting back and clipping
# moved 18: on a GPU, where a Concat pack step of 20 heads at roberta-large shape spent 5.0 of its
# 12.2 ms on those passes (docs/results/profile_pack_step_gpu_indexed_read.md). On a CPU the one
# multiply of a bfloat16 by a float32 runs far slower than a cast and a float32 multiply, and the
# step was slower (docs/results/profile_pack_step_cpu_narrow.md).
NARROW_GRADS = {"cuda": True}


class Pack:
    """K taggers of one architecture as stacked parameters ``[K, ...]``, run as one module."""

    def __init__(self, taggers: list[torch.nn.Module], train: list | None = None):
        """``train``: the runs' train splits, when every one is held: then each step gathers all the
        heads' rows at once (`PackRows`); otherwise each head's batch is built apart and padded."""
        self.k = len(taggers)
        held = train and all(isinstance(s, SplitArrays) and not s.streamed for s in train)
        self.rows = PackRows(train) if held else None
        params, self.buffers = torch.func.stack_module_state(taggers)
        self.base = copy.deepcopy(taggers[0]).to("meta")  # the code; its weights come from the stacks
        # The weights as two flat leaves [K, P] (AdamW's two groups), each weight a view of one: a
        # step casts, clips and updates two tensors, not two per weight (on a GPU each is a kernel).
        decays = {name: decays_weight(name, p) for name, p in taggers[0].named_parameters()}
        self.slots = {group: [(name, params[name].shape[1:]) for name in params if decays[name] == (group == "decay")]
                      for group in ("decay", "no_decay")}
        self.flat = {group: torch.cat([params[name].detach().reshape(self.k, -1) for name, _ in slots],
                                      dim=1).requires_grad_()
                     for group, slots in self.slots.items() if slots}

    def train(self, mode: bool) -> None:
        self.base.train(mode)

    def logits(self, hidden: torch.Tensor, mask: torch.Tensor, *, shared: bool = False,
               lengths: list[torch.Tensor] | None = None, heads: list[int] | None = None,
               weights: dict | None = None) -> torch.Tensor:
        """``[K, B, T, n_labels]``: head k on ``hidden[k]`` (``[K, B, T, L, d]``, ``lengths``: each head's
        packed sentence lengths), or with ``shared`` every head on the same ``hidden [B, T, L, d]``
        (evaluation: the batch is built once). ``heads``: only these (K of them), in this order.
        ``weights``: those heads' flat weights already in the compute dtype (`narrow_weights`)."""
        if shared and not self.base.fusion.shares_evaluation_batch:
            return self.each(hidden, mask, heads=heads)
        flat, buffers = self.flat, self.buffers
        if weights is not None:  # the first len(heads) heads' weights, cast: `narrow_weights`
            flat = weights
            buffers = {name: t[:len(heads)] for name, t in buffers.items()}
        elif heads is not None and heads == list(range(len(heads))) and len(heads) < self.k:  # the first ones
            flat = {group: t[:len(heads)] for group, t in flat.items()}  # a view: no gather, no copy
            buffers = {name: t[:len(heads)] for name, t in buffers.items()}
        elif heads is not None and len(heads) < self.k:  # indexed: gradients still reach the stacks
            index = to_device(np.asarray(heads), next(iter(flat.values())).device)
            flat = {group: t.index_select(0, index) for group, t in flat.items()}
            buffers = {name: t.index_select(0, index) for name, t in buffers.items()}
        if self.base.fusion.casts_stacked_weights:  # cast here, once, rather than weight by weight
            flat = {group: t.to(compute_dtype(hidden)) for group, t in flat.items()}
        params = self.named(flat)
        k = next(iter(flat.values())).shape[0]
        h = stacked(self.base.fusion, under(params, "fusion."), under(buffers, "fusion."), hidden, mask, k=k,
                    shared=shared, lengths=lengths)  # [K, B, T, d]
        h = self.base.dropout(h)  # element-wise: each head its own masks (identity in eval)
        return linear(h.flatten(1, -2), params["classifier.weight"], params["classifier.bias"]).reshape(
            *h.shape[:-1], -1)

    def step(self, runs: list[Run], orders, *, heads: list[int], optimizer: PackOptimizer) -> torch.Tensor:
        """One optimizer step, head ``heads[i]`` on its run ``runs[i]``'s sentences ``orders[i]``;
        returns their losses."""
        lead = runs[0]
        with lead.autocast():
            dtype = compute_dtype(torch.empty(0, device=lead.device))  # the heads' compute dtype
        if self.rows is not None:  # every head's rows in one gather
            hidden, mask, labels, lengths = self.rows.batch(orders, heads=heads, device=lead.device, dtype=dtype,
                                                            multiple=PACK_MULTIPLE)
        else:
            batches = [r.train.batch(o, device=r.device, packed=True, multiple=PACK_MULTIPLE)
                       for r, o in zip(runs, orders)]
            hidden, mask, labels = _padded(batches, dtype=dtype)
            lengths = [b.lengths for b in batches]
        return self.step_on(hidden, mask, labels, lengths, heads=heads, optimizer=optimizer,
                            autocast=lead.autocast(), max_grad_norm=lead.config.max_grad_norm)

    def step_on(self, hidden, mask, labels, lengths, *, heads: list[int], optimizer: PackOptimizer, autocast,
                max_grad_norm: float) -> torch.Tensor:
        """One optimizer step of ``heads`` on stacked batches (``hidden [K, 1, R, L, d]``, ``lengths``:
        each head's sentence lengths); returns their losses."""
        optimizer.zero_grad()
        with autocast:
            narrow = self.narrow_weights(heads, compute_dtype(hidden))
            logits = self.logits(hidden, mask, lengths=lengths, heads=heads, weights=narrow)  # [K, 1, R, n_labels]
        losses = head_losses(logits, labels)
        losses.sum().backward()  # head k's parameters see only its own loss: its solo gradient
        if narrow is not None:
            widen_grads(self.flat, {group: t.grad for group, t in narrow.items()}, max_grad_norm)
        elif max_grad_norm > 0:
            clip_per_head([t.grad for t in self.flat.values() if t.grad is not None], max_grad_norm)
        optimizer.step(heads)
        return losses.detach()

    def narrow_weights(self, heads: list[int], dtype: torch.dtype) -> dict | None:
        """The weights of ``heads`` (the first ones) cast to ``dtype`` as leaves of their own, or None
        (float32, a fusion that casts weight by weight, heads not first, a device not in
        `NARROW_GRADS`). Their gradients then stay in ``dtype``, and `widen_grads` clips and widens
        them into the float32 leaves in one pass a leaf, where autograd's cast back and the clip's norm
        and multiply took three."""
        n = len(heads)
        first = next(iter(self.flat.values()))
        if (dtype == torch.float32 or not self.base.fusion.casts_stacked_weights or heads != list(range(n))
                or not NARROW_GRADS.get(first.device.type, False)):
            return None
        return {group: t.detach()[:n].to(dtype).requires_grad_() for group, t in self.flat.items()}

    def each(self, hidden: torch.Tensor, mask: torch.Tensor, *, heads: list[int] | None = None) -> torch.Tensor:
        """``[K, B, T, n_labels]``: every head (or ``heads``) on the same ``hidden [B, T, L, d]``, one
        after another (each its solo forward, on views of its weights)."""
        return torch.stack([torch.func.functional_call(self.base, self.weights(k), (hidden, mask))
                            for k in (range(self.k) if heads is None else heads)])

    def named(self, flat: dict) -> dict:
        """Each weight by its name, ``[K', *shape]``: a view of ``flat`` (`flat`, or it cast or indexed)."""
        named = {}
        for group, t in flat.items():
            slots = self.slots[group]
            pieces = t.split([shape.numel() for _, shape in slots], dim=1)  # one cat in the backward
            named.update({name: piece.view(t.shape[0], *shape) for (name, shape), piece in zip(slots, pieces)})
        return named

    @property
    def params(self) -> dict:
        """The K heads' weights by name, ``[K, ...]`` float32 views of the flat leaves."""
        return self.named(self.flat)

    def param_groups(self, config: TrainConfig, flat: dict | None = None) -> list[dict]:
        """AdamW's two groups (`loop.param_groups`) over ``flat`` (default: the pack's leaves; or one
        head's slices of them) at ``config``'s rate."""
        flat = self.flat if flat is None else flat
        return [{"params": [flat[group]], "weight_decay": config.weight_decay if group == "decay" else 0.0,
                 "lr": config.max_lr} for group in self.flat]

    def weights(self, k: int) -> dict:
        """Head k's parameters and buffers (views of the stacks), keyed as in the tagger."""
        return {name: t[k] for name, t in (*self.params.items(), *self.buffers.items())}

    def state(self, k: int) -> dict:
        """Head k's weights, keyed as its run's ``model.state_dict()`` (a ModuleList: ``0.`` first)."""
        return {f"0.{name}": t for name, t in self.weights(k).items()}


def head_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``[K]``: each head's mean cross-entropy over its own scored rows (IGNORE left out), in float32,
    as `tasks.batch_loss` is for one head."""
    k = logits.shape[0]
    rows = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE,
                           reduction="none").view(k, -1)
    return rows.sum(1) / (labels.view(k, -1) != IGNORE).sum(1).clamp_min(1)


def clip_per_head(grads: list[torch.Tensor], max_norm: float) -> None:
    """`clip_grad_norm_` for each head on its slice ``[k]`` of every stacked gradient: the same norm
    (the norm of the per-tensor norms), the same ``max_norm / (norm + 1e-6)`` factor, at most 1."""
    k = grads[0].shape[0]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(k, -1), dim=1) for g in grads])  # [P, K]
    coef = torch.clamp(max_norm / (torch.linalg.vector_norm(norms, dim=0) + 1e-6), max=1.0)  # [K]
    for g in grads:
        g.mul_(coef.view(k, *(1,) * (g.ndim - 1)).to(g.dtype))


def widen_grads(leaves: dict, grads: dict, max_norm: float) -> None:
    """Each float32 leaf's gradient ``[K, P]`` from the narrow gradient ``[n, P]`` of its first n heads
    (rows past n zeros, as autograd's slice leaves them), clipped per head as `clip_per_head` clips
    (the norms accumulated in float32 from the same values): one kernel a leaf writes it."""
    coef = None
    if max_norm > 0:
        norms = torch.stack([torch.linalg.vector_norm(g, dim=1, dtype=torch.float32) for g in grads.values()])
        coef = torch.clamp(max_norm / (torch.linalg.vector_norm(norms, dim=0) + 1e-6), max=1.0)[:, None]  # [n, 1]
    for group, g in grads.items():
        leaf = leaves[group]
        n = g.shape[0]
        full = torch.empty_like(leaf) if n == leaf.shape[0] else torch.zeros_like(leaf)
        if coef is None:
            full[:n].copy_(g)
        else:
            torch.mul(g, coef, out=full[:n])  # bfloat16 times float32: float32, as the clip's product
        leaf.grad = full


def _padded(batches, *, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K packed batches ``[1, R_k, ...]`` as ``[K, 1, R, ...]``, R the largest R_k (padding: zeros,
    mask False, labels IGNORE, as `SplitArrays.batch` pads), the states in ``dtype`` (the dtype the
    heads compute in: converted once here rather than by each product)."""
    first = batches[0]
    R = max(b.hidden.shape[1] for b in batches)
    hidden = first.hidden.new_zeros((len(batches), 1, R, *first.hidden.shape[2:]), dtype=dtype)
    mask = first.mask.new_zeros((len(batches), 1, R))
    labels = first.labels.new_full((len(batches), 1, R), IGNORE)
    for k, b in enumerate(batches):
        n = b.hidden.shape[1]
        hidden[k, :, :n], mask[k, :, :n], labels[k, :, :n] = b.hidden, b.mask, b.labels
    return hidden, mask, labels


def _check(configs: list[TrainConfig]) -> None:
    bad = [c for c in configs if not can_pack(c)]
    if bad:
        raise LayerfuseError(f"run {bad[0].fusion} seed {bad[0].seed} cannot train in a pack: only FE NER runs of "
                              f"{', '.join(fusions_that_pack())} with grad_accum 1, fixed layers and no fp16 can")
    if len({pack_key(c) for c in configs}) > 1:
        raise LayerfuseError(f"the runs of a pack may differ in {', '.join(OWN)} and in nothing else")
    if len(set(configs)) < len(configs):
        raise LayerfuseError("a pack holds the same run twice")


def _prefixed(log, config: TrainConfig):
    if log is None:
        return None
    name = f"N={config.shots or 'all'} epochs={config.epochs} lr={config.max_lr:g} seed {config.seed}"
    return lambda message: log(f"{name}: {message}")
