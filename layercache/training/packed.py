"""Training a pack of heads at once: `train_pack(configs, data) -> [RunResult]` trains K runs that
differ only in their seed as one stacked module (issue 27, ``sweep --pack K``).

A few-shot head is tiny, so one run's step is mostly per-call overhead; K heads in one call share it.
Runs that differ only in seed have the same number of steps, the same evaluation points and the
same schedule, so one AdamW over the stacked parameters (Adam is element-wise) gives each head its
own solo update, provided the loss is each head's own mean (summed over heads: each head's gradient
is its solo gradient) and the gradient is clipped per head, by that head's global norm, as
`clip_grad_norm_` does for a solo run. Each head is built by `prepare_run`, exactly as its solo run
(its sample, its seeded initialisation, its batch order), then stacked
(`torch.func.stack_module_state`); at each step each head gets its own batch, all padded to one
``[K, 1, R]`` packed shape (padding rows are zeros, their labels IGNORE: token-wise heads never see
them, and the extra-layer head attends within each head's sentences, from their lengths). The
fusion runs as `layercache.fusions.stacked` writes it: each product batched over the K heads. The
dropouts run on stacked ``[K, ...]`` tensors, so each head draws its own masks, from the global RNG
in one draw rather than its solo sequence: with dropout a packed head is a different, equally
valid, draw of its run; without dropout it matches its solo run up to floating-point summation
order. Every dev (and test) batch is built once and every head is scored on it.

Packs: FE NER runs (any fusion), one micro-batch per step (grad_accum 1), fixed layers (auto:K
picks layers per seed) and no fp16 loss scaling; anything else runs alone (`train_head`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from ..errors import LayercacheError
from ..fusions import FUSIONS
from ..fusions.dwatt import compute_dtype
from ..fusions.stacked import SHARED_INPUT, linear, stacked
from .config import RunResult, TrainConfig
from .data import IGNORE
from .diagnostics import layer_usage
from .loop import PACK_MULTIPLE, Book, Run, build_optimizer, prepare_run, train_head
from .memory import keep_freed_memory
from .runtime import apply_thread_setting, now

PACKABLE_FUSIONS = tuple(FUSIONS)  # each has a stacked forward (`layercache.fusions.stacked`)


def can_pack(config: TrainConfig) -> bool:
    """Whether ``config`` may train in a pack (see the module's docstring for why the others may not)."""
    return (config.mode == "fe" and config.task == "ner" and config.fusion in PACKABLE_FUSIONS
            and config.grad_accum == 1 and config.precision != "fp16"
            and not str(config.layers or "").startswith("auto"))


def pack_key(config: TrainConfig) -> TrainConfig:
    """What the runs of one pack share: every field but the seed."""
    return replace(config, seed=0)


def train_pack(configs: list[TrainConfig], data, *, log=None, keep_tagger: bool = False) -> list[RunResult]:
    """Train ``configs`` (same run but for the seed) together; one `RunResult` per config, in order,
    as `train_head` would report it, but ``seconds``: the pack's, divided by K, with ``pack`` = K."""
    if len(configs) == 1:
        return [train_head(configs[0], data, log=log, keep_tagger=keep_tagger)]
    _check(configs)
    t_start = time.perf_counter()
    keep_freed_memory()
    apply_thread_setting()
    runs = [prepare_run(config, data) for config in configs]  # each seeded and built as its solo run
    lead = runs[0]
    if len({(r.layers, r.steps_per_epoch) for r in runs}) > 1:
        raise LayercacheError("the runs of a pack must fuse the same layers and take the same steps")
    pack = Pack([r.tagger for r in runs])
    optimizer, scheduler = build_optimizer(lead.config, lead.tagger, total_steps=lead.total_steps, params=pack.params)
    books = [Book(log=_prefixed(log, r.config.seed)) for r in runs]
    clock = {"train": 0.0, "eval": 0.0}
    if lead.total_steps == 0:
        _evaluate(pack, runs, books, step=0, epoch=0, clock=clock)
    step = 0
    for epoch in range(1, lead.config.epochs + 1):
        t0 = now(lead.device)
        pack.train(True)
        for orders in zip(*(r.epoch_batches() for r in runs)):  # each head its own seeded order
            losses = pack.step(runs, orders, optimizer=optimizer)
            scheduler.step()
            step += 1
            for book, loss in zip(books, losses):
                book.add_loss(loss)
            if lead.eval_due(step):
                clock["train"] += now(lead.device) - t0
                _evaluate(pack, runs, books, step=step, epoch=epoch, clock=clock)
                pack.train(True)
                t0 = now(lead.device)
        clock["train"] += now(lead.device) - t0
        if not lead.evaluates_per_step:
            _evaluate(pack, runs, books, step=step, epoch=epoch, clock=clock)
    for run, book in zip(runs, books):
        book.restore_best(run)  # each head unstacked into its own module, at its best dev point
    _score_test_at_best(runs, books, clock)
    usages = [layer_usage(r.tagger, r.dev, layers=r.layers, device=r.device, batch_size=r.eval_batch_size,
                          autocast=r.autocast()) for r in runs]
    share = (time.perf_counter() - t_start) / len(runs)
    results = []
    for run, book, usage in zip(runs, books, usages):
        book.clock = {name: seconds / len(runs) for name, seconds in clock.items()}
        result = run.result(book, seconds=share, keep_tagger=keep_tagger, usage=usage)
        result.seconds["pack"] = len(runs)
        results.append(result)
    return results


class Pack:
    """K taggers of one architecture as stacked parameters ``[K, ...]``, run as one module."""

    def __init__(self, taggers: list[torch.nn.Module]):
        self.k = len(taggers)
        self.params, self.buffers = torch.func.stack_module_state(taggers)  # leaves the optimizer updates
        self.base = copy.deepcopy(taggers[0]).to("meta")  # the code; its weights come from the stacks
        self.fusion_params = _under(self.params, "fusion.")  # the same tensors, named as in the fusion
        self.fusion_buffers = _under(self.buffers, "fusion.")

    def train(self, mode: bool) -> None:
        self.base.train(mode)

    def logits(self, hidden: torch.Tensor, mask: torch.Tensor, *, shared: bool = False,
               lengths: list[torch.Tensor] | None = None) -> torch.Tensor:
        """``[K, B, T, n_labels]``: head k on ``hidden[k]`` (``[K, B, T, L, d]``, ``lengths``: each head's
        packed sentence lengths), or with ``shared`` every head on the same ``hidden [B, T, L, d]``
        (evaluation: the batch is built once)."""
        if shared and not isinstance(self.base.fusion, SHARED_INPUT):
            return self.each(hidden, mask)
        h = stacked(self.base.fusion, self.fusion_params, self.fusion_buffers, hidden, mask, k=self.k, shared=shared,
                    lengths=lengths)  # [K, B, T, d]
        h = self.base.dropout(h)  # element-wise: each head its own masks (identity in eval)
        weight, bias = self.params["classifier.weight"], self.params["classifier.bias"]
        return linear(h.flatten(1, -2), weight, bias).reshape(*h.shape[:-1], -1)

    def step(self, runs: list[Run], orders, *, optimizer) -> torch.Tensor:
        """One optimizer step, head k on its run's sentences ``orders[k]``; returns the K losses."""
        lead = runs[0]
        batches = [r.train.batch(o, device=r.device, packed=True, multiple=PACK_MULTIPLE) for r, o in zip(runs, orders)]
        with lead.autocast():
            hidden, mask, labels = _padded(batches, dtype=compute_dtype(batches[0].hidden))
        return self.step_on(hidden, mask, labels, [b.lengths for b in batches], optimizer=optimizer,
                            autocast=lead.autocast(), max_grad_norm=lead.config.max_grad_norm)

    def step_on(self, hidden, mask, labels, lengths, *, optimizer, autocast, max_grad_norm: float) -> torch.Tensor:
        """One optimizer step on stacked batches (``hidden [K, 1, R, L, d]``, ``lengths``: each head's
        sentence lengths); returns the K losses."""
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            logits = self.logits(hidden, mask, lengths=lengths)  # [K, 1, R, n_labels]
        losses = head_losses(logits, labels)
        losses.sum().backward()  # head k's parameters see only its own loss: its solo gradient
        if max_grad_norm > 0:
            clip_per_head([p.grad for p in self.params.values() if p.grad is not None], max_grad_norm)
        optimizer.step()
        return losses.detach()

    def each(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[K, B, T, n_labels]``: every head on the same ``hidden [B, T, L, d]``, one after another
        (each its solo forward, on views of its weights)."""
        return torch.stack([torch.func.functional_call(self.base, self.weights(k), (hidden, mask))
                            for k in range(self.k)])

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


def _evaluate(pack: Pack, runs: list[Run], books: list[Book], *, step: int, epoch: int, clock: dict) -> None:
    """Every head scored on the lead run's dev split (the same sentences for all), each batch once."""
    lead = runs[0]
    t0 = now(lead.device)
    pack.train(False)
    scores = lead.task.score_heads(lambda h, m: pack.logits(h, m, shared=True), pack.k, lead.dev, data=lead.data,
                                   device=lead.device, batch_size=lead.eval_batch_size, autocast=lead.autocast())
    for k, (run, book) in enumerate(zip(runs, books)):
        book.note(run, scores[k], step=step, epoch=epoch, state=lambda k=k: pack.state(k))
    clock["eval"] += now(lead.device) - t0


def _score_test_at_best(runs: list[Run], books: list[Book], clock: dict) -> None:
    """Each head's test score at its best dev point (restored), all heads on each test batch at once."""
    lead = runs[0]
    if lead.test is None:
        return
    t0 = now(lead.device)
    best = Pack([r.tagger for r in runs])
    best.train(False)
    scores = lead.task.score_heads(lambda h, m: best.logits(h, m, shared=True), best.k, lead.test, data=lead.data,
                                   device=lead.device, batch_size=lead.eval_batch_size, autocast=lead.autocast())
    for run, book, test in zip(runs, books, scores):
        book.test = test
        book.evals[book.best["index"]].update(run.task.test_record(test))
    clock["eval"] += now(lead.device) - t0


def _check(configs: list[TrainConfig]) -> None:
    bad = [c for c in configs if not can_pack(c)]
    if bad:
        raise LayercacheError(f"run {bad[0].fusion} seed {bad[0].seed} cannot train in a pack: only FE NER runs of "
                              f"{', '.join(PACKABLE_FUSIONS)} with grad_accum 1, fixed layers and no fp16 can")
    if len({pack_key(c) for c in configs}) > 1 or len({c.seed for c in configs}) < len(configs):
        raise LayercacheError("the runs of a pack must differ in their seed and in nothing else")


def _under(named: dict, prefix: str) -> dict:
    return {name[len(prefix):]: t for name, t in named.items() if name.startswith(prefix)}


def _prefixed(log, seed: int):
    return None if log is None else (lambda message: log(f"seed {seed}: {message}"))
