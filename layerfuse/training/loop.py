"""Training heads: `train_head(config, data) -> RunResult`, one run; `train_runs`, the one loop that
every run goes through, alone or in a pack (`layerfuse.training.packed`).

Protocol (paper §5, §9): the seed fixes the few-shot sample, the head's initialisation and the
batch order; AdamW; the learning rate decays linearly from its maximum to zero over
``epochs * steps_per_epoch`` (after an optional linear warmup); dev is scored at each evaluation
point (NER: seqeval micro-F1; MLM: perplexity); the best dev point is reported, with the test score
of the head at that point when the data has a test split (scored once, at the end, from the best
state kept in memory). On CPU a run is deterministic for a seed. The same loop trains FE heads on
cached states and FT heads on a live backbone (`layerfuse.finetune`): the data says which; the
task (`layerfuse.training.tasks`) says what the head is and how it is scored.

`train_runs` steps K >= 1 prepared runs side by side (each its own sample, order, schedule and
evaluation points), records each evaluation, keeps each run's best dev point, scores test there
and reports. How the heads compute a step, a dev evaluation and the test score is the one thing it
leaves to its `Heads`: `Solo`, a run's own module as it is (any run: FT, MLM, gradient
accumulation, fp16, every fusion), or `packed.Stacked`, K heads as one stacked module.
"""

from __future__ import annotations

import copy
import hashlib
import math
import time
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
import torch

from ..errors import LayerfuseError
from ..fusions import FUSIONS, count_parameters, packable
from ..precision import precision_of
from ..tasks import task_of
from ..transfer import to_device
from ..versions import versions
from .arrays import Split
from .config import RunResult, TrainConfig
from .data import HeadData, choose_layers
from .diagnostics import layer_usage
from .evaluation import non_finite_layers
from .memory import keep_freed_memory
from .runtime import apply_thread_setting, autocast, now, pick_device
from .tasks import IGNORE, batch_loss, training_task

PACK_MULTIPLE = 32  # training batches are padded to a multiple of this many rows (see SplitArrays.batch)


def train_head(config: TrainConfig, data: HeadData, *, log=None, keep_head: bool = True,
               keep_tagger: bool | None = None, progress=None) -> RunResult:
    """Sample, build, train and evaluate one head; returns its `RunResult`, with the head at its
    best dev point in ``.tagger`` unless ``keep_head`` is False (sweeps: no copies kept).
    ``keep_tagger`` is the former name of ``keep_head`` and still accepted. ``progress``: told
    ``start(total_steps)``, ``step(loss tensor)`` after each step and ``evaluated(record)`` after each
    dev evaluation (`layerfuse.cli.progress.TrainBar`).

    Like any seeded training it seeds torch's global generator with the run's seed. ``data`` is what
    `load_for_run` or `load_data` returns, not an entry. ``LAYERFUSE_NUM_THREADS``, when set, is torch's
    thread count during the run; the caller's count is back after it.

    Two things stay in the calling process after it returns. Under glibc (Linux) malloc keeps up to 1 GiB
    of freed heap for reuse instead of returning it, so steps stop page-faulting (`layerfuse.training.memory`;
    ``LAYERFUSE_KEEP_HEAP=0`` before the first run turns it off). The splits the run read stay in the
    activation store for later runs, within its memory budget, until `layerfuse.training.clear_store`."""
    if keep_tagger is not None:
        keep_head = keep_tagger
    if not isinstance(data, HeadData):
        raise LayerfuseError(f"train_head takes the data load_for_run or load_data returns, got a "
                             f"{type(data).__name__}: train_head(config, load_for_run(entry, layers=config.layers, "
                             "shots=config.shots, seed=config.seed))")
    t_start = time.perf_counter()
    threads = torch.get_num_threads()
    try:
        prepare_process()
        run = prepare_run(config, data)
        return train_runs([run], Solo(run), t_start=t_start, keep_head=keep_head, logs=[log], progress=progress)[0]
    finally:
        torch.set_num_threads(threads)


def prepare_process() -> None:
    """Process-wide, once: steps reuse freed activations instead of page-faulting; the thread setting."""
    keep_freed_memory()
    apply_thread_setting()


class Heads(Protocol):
    """How the K heads of `train_runs` compute: the one thing a run alone (`Solo`) and a pack
    (`packed.Stacked`) do differently. ``heads``: indices of the loop's runs, in increasing order.
    ``step``: one optimizer step of each of ``heads`` on its sentence positions ``orders[i]``, their
    losses ``[len(heads)]`` on the device; ``evaluate``: their dev scores now (NER {f1, loss}; MLM
    {loss, ppl}); ``test_at_best``: their test scores, their runs' modules restored to their best dev
    point; ``state(k)``: head k's weights, keyed as its run's ``model.state_dict()``."""

    def train(self, mode: bool) -> None: ...
    def step(self, heads: list[int], orders: list[np.ndarray]) -> torch.Tensor: ...
    def evaluate(self, heads: list[int]) -> list[dict]: ...
    def test_at_best(self, heads: list[int]) -> list[dict]: ...
    def state(self, k: int) -> dict: ...


def train_runs(runs: list[Run], heads: Heads, *, t_start: float, keep_head: bool, logs: list,
               progress=None) -> list[RunResult]:
    """Train the prepared ``runs`` side by side, their heads computed by ``heads``; one `RunResult` a
    run, in order, its ``seconds`` the loop's divided by K.

    The loop steps while any run has steps left, each run on its own next batch until its own last
    step; each run scores dev at its own evaluation points (after the step that reaches one, or at
    the end of each epoch without them; at step 0 when it has no steps) and keeps its best dev
    point (`Book`). At the end each run is restored to that point, test is scored there, and its
    layer usage is read. ``logs``: each run's logger (or None); ``progress``: see `train_head`."""
    lead = runs[0]
    books = [Book(log=log, on_eval=progress.evaluated if progress else None) for log in logs]
    clock = {"train": 0.0, "eval": 0.0}
    total = max(r.total_steps for r in runs)
    epochs = [0] * len(runs)

    def evaluate(due: list[int], step: int) -> None:
        t0 = now(lead.device)
        heads.train(False)
        for k, scores in zip(due, heads.evaluate(due)):
            books[k].note(runs[k], scores, step=step, epoch=epochs[k], state=lambda k=k: heads.state(k))
        clock["eval"] += now(lead.device) - t0

    if progress:
        progress.start(total)
    if not_started := [k for k, r in enumerate(runs) if r.total_steps == 0]:
        evaluate(not_started, 0)
    steps = [r.steps() for r in runs]
    running = RunningLoss(len(runs), device=lead.device)
    heads.train(True)
    t0 = now(lead.device)
    for step in range(1, total + 1):
        active = [k for k, r in enumerate(runs) if step <= r.total_steps]  # a run stops after its last step
        due, orders = [], []
        for k in active:
            epochs[k], order, ends_epoch = next(steps[k])
            orders.append(order)
            if runs[k].eval_due(step) or (ends_epoch and not runs[k].evaluates_per_step):
                due.append(k)
        losses = heads.step(active, orders)
        running.add(losses, active)
        if progress:
            progress.step(losses[0])
        if due:
            clock["train"] += now(lead.device) - t0
            running.hand_to(books, due)
            evaluate(due, step)
            heads.train(True)
            t0 = now(lead.device)
    clock["train"] += now(lead.device) - t0
    for run, book in zip(runs, books):
        book.restore_best(run)  # each head in its own module, at its best dev point
    best = [k for k, book in enumerate(books) if book.best_state is not None]
    if lead.test is not None and best:
        t0 = now(lead.device)
        for k, test in zip(best, heads.test_at_best(best)):
            refuse_non_finite_features(runs[k], runs[k].test, test, train_loss=None)
            books[k].test = test
            books[k].evals[books[k].best["index"]].update(runs[k].task.test_record(test))
        clock["eval"] += now(lead.device) - t0
    usages = [layer_usage(r.head, r.dev, layers=r.layers, device=r.device, batch_size=r.eval_batch_size,
                          autocast=r.autocast()) for r in runs]
    share = (time.perf_counter() - t_start) / len(runs)
    results = []
    for run, book, usage in zip(runs, books, usages):
        book.clock = {name: seconds / len(runs) for name, seconds in clock.items()}
        results.append(run.result(book, seconds=share, keep_head=keep_head, usage=usage))
    return results


class Solo:
    """One run's own module (the head, and the backbone in FT) stepped as it is, by `train_step`:
    the loop's heads for a run alone, whatever it trains (K = 1)."""

    def __init__(self, run: Run):
        self.run = run

    def train(self, mode: bool) -> None:
        self.run.model.train(mode)

    def step(self, heads: list[int], orders: list[np.ndarray]) -> torch.Tensor:
        train_step(self.run, orders[0])
        return self.run.last_loss.reshape(1)

    def evaluate(self, heads: list[int]) -> list[dict]:
        return [_score(self.run, self.run.dev)]

    def state(self, k: int) -> dict:
        return self.run.model.state_dict()

    def test_at_best(self, heads: list[int]) -> list[dict]:
        return [_score(self.run, self.run.test)]


class RunningLoss:
    """The K heads' training losses summed since each one's last evaluation, on the device: one
    addition a step, not one per head; a head's share goes to its `Book` when it is scored."""

    def __init__(self, k: int, *, device):
        self.total = torch.zeros(k, device=device)
        self.steps = [0] * k

    def add(self, losses: torch.Tensor, heads: list[int]) -> None:
        if len(heads) == len(self.steps):
            self.total += losses
        else:
            self.total.index_add_(0, to_device(np.asarray(heads), losses.device), losses)
        for k in heads:
            self.steps[k] += 1

    def hand_to(self, books: list[Book], heads: list[int]) -> None:
        for k in heads:
            books[k].loss_sum, books[k].loss_n = self.total[k].clone(), self.steps[k]
            self.total[k], self.steps[k] = 0, 0


@dataclass(eq=False)
class Run:
    """Everything one run builds before its first step."""

    config: TrainConfig
    data: HeadData
    device: torch.device
    ids: np.ndarray  # the sample's cache sentence ids
    layers: tuple[int, ...]  # the layers the head reads: the fused ones, then z_L when it is read apart
    scores: list | None  # auto:K's nu per candidate layer
    train: Split
    dev: Split
    test: Split | None
    task: object  # layerfuse.training.tasks: NER or MLM
    head: torch.nn.Module  # a TokenTagger (NER) or a FusedMaskedLM (MLM)
    head_kwargs: dict  # TokenTagger(**head_kwargs) (FusedMaskedLM for MLM) rebuilds the head
    model: torch.nn.ModuleList  # the head, and the backbone in FT
    optimizer: torch.optim.Optimizer
    scheduler: object
    scaler: torch.amp.GradScaler
    steps_per_epoch: int
    total_steps: int
    eval_at: set = field(default_factory=set)
    order_gen: torch.Generator | None = None  # batch order, apart from dropout's RNG
    last_loss: torch.Tensor | None = None

    @property
    def per_step(self) -> int:
        return self.config.batch_size * self.config.grad_accum

    @property
    def evaluates_per_step(self) -> bool:
        return bool(self.config.eval_every or self.config.eval_points)

    def autocast(self):
        return autocast(self.config.precision, self.device)

    def epoch_batches(self):
        """The sentence positions of each optimizer step of one epoch, in the seeded order (a streamed
        train split draws it block-wise: `SplitArrays.epoch_order`)."""
        order = self.train.epoch_order(self.order_gen)
        return (order[b * self.per_step:(b + 1) * self.per_step] for b in range(self.steps_per_epoch))

    def steps(self):
        """(epoch, sentence positions, whether it ends its epoch) of each optimizer step of the run,
        in order (`train_runs` steps its runs through these side by side). Each epoch begins with
        ``train.begin_epoch`` (FT MLM draws that epoch's masks; otherwise nothing)."""
        for epoch in range(1, self.config.epochs + 1):
            self.train.begin_epoch(epoch, seed=self.config.seed)
            for b, order in enumerate(self.epoch_batches()):
                yield epoch, order, b == self.steps_per_epoch - 1

    def eval_due(self, step: int) -> bool:
        every = self.config.eval_every
        return bool(every and (step % every == 0 or step == self.total_steps)) or step in self.eval_at

    @property
    def eval_batch_size(self) -> int:
        """Sentences per evaluation batch: on CUDA as many as a share of the GPU's free memory holds
        (`budget.eval_sentences`); on a CPU four training batches (at least 64), which keeps a
        batch's rows in cache."""
        if self.device.type == "cuda":
            from .budget import eval_sentences

            return eval_sentences(self.dev.row_bytes, self.device)
        return max(64, 4 * self.config.batch_size)

    def result(self, book: Book, *, seconds: float, keep_head: bool, usage: dict | None) -> RunResult:
        meta = self.data.meta
        return RunResult(
            config=self.config.record(), cache_key=meta.get("key"), cache_path=self.data.path,
            model=meta.get("model"), dataset=meta.get("dataset"), layers=[int(x) for x in self.layers],
            layer_scores=None if self.scores is None else [[int(layer), float(nu)] for layer, nu in self.scores],
            n_train_sentences=int(self.train.n_sentences), n_train_words=self.train.n_words,
            sample_fingerprint=hashlib.sha1(np.asarray(self.ids, dtype=np.int64).tobytes()).hexdigest()[:16],
            params=count_parameters(self.head), steps_per_epoch=self.steps_per_epoch,
            total_steps=self.total_steps, evals=book.evals, best_step=book.best["step"],
            best_epoch=book.best["epoch"], **self.task.summary(book.best["scores"], book.test),
            seconds={"total": seconds, "train": book.clock["train"], "eval": book.clock["eval"]},
            device=str(self.device), versions=versions(), threads=torch.get_num_threads(),
            tagger_kwargs=self.head_kwargs,
            backbone_params=count_parameters(self.model[1]) if len(self.model) > 1 else None, layer_usage=usage,
            labels_fingerprints=meta.get("label_fingerprints"), label_set=self._label_set(),
            tagger=self.head if keep_head else None,
        )

    def _label_set(self) -> str | None:
        """The name of the label set this run trained on, for its record; None for NER (what a record without
        one has always meant) and for MLM (no labels are read)."""
        name = self.data.meta.get("label_set")
        return name if task_of(self.config).labels_from_data and name not in (None, "ner") else None


def prepare_run(config: TrainConfig, data: HeadData, *, built: dict | None = None) -> Run:
    """The sample, the fused layers, the splits, the head (seeded), the optimizer and the schedule.
    ``built``: heads already built, by seed, for runs whose head depends on nothing else (`seeded_head`)."""
    device = pick_device(config.device)
    if config.precision == "fp16" and device.type != "cuda":  # as train-head refuses it: its loss scaling is CUDA's
        raise LayerfuseError(f"precision fp16 needs CUDA; on {device.type} use bf16 or fp32")
    task = training_task(config, data.meta, where=data.path)
    ids, train, dev, test, layers, scores, query_layer = select_splits(config, data)
    backbone = data.trainable_backbone(config)  # FT: reset to its pretrained weights, frozen as asked
    n_fused = len(layers) - 1 if query_layer == "top" else len(layers)  # a z_L read apart is not fused
    head, kwargs = seeded_head(lambda: task.head(replace(config, query_layer=query_layer), data, n_layers=n_fused,
                                                 device=device, backbone=backbone),
                               seed=config.seed, built=None if backbone is not None else built)
    model = torch.nn.ModuleList([head] + ([backbone] if backbone is not None else []))
    steps_per_epoch = math.ceil(train.n_sentences / (config.batch_size * config.grad_accum))
    total = config.epochs * steps_per_epoch
    optimizer, scheduler = build_optimizer(config, model, total_steps=total)
    eval_at = set()
    if config.eval_points:  # more points than steps is every step (10**12 of them filled the memory)
        points = min(config.eval_points, max(total, 1))
        eval_at = {max(1, round(total * k / points)) for k in range(1, points + 1)}
    scaler = torch.amp.GradScaler(device.type, enabled=precision_of(config.precision).scales_loss)
    return Run(config, data, device, ids, layers, scores, train, dev, test, task, head, kwargs, model, optimizer,
               scheduler, scaler, steps_per_epoch, total, eval_at, torch.Generator().manual_seed(config.seed))


def seeded_head(build, *, seed: int, built: dict | None):
    """``build()`` (a head and its kwargs) under ``torch.manual_seed(seed)``: the seed fixes the
    initialisation (and the dropout masks). ``built``, when given, keeps each seed's first head and
    the RNG state it left; a later run of that seed gets a copy and that state, so it starts where
    building it would have left it, with none of the initialisation's draws (at roberta-large shape
    a tenth of a second of host time a head: a Figure-3 cell's four epoch caps draw one). The first
    head itself is kept, not a copy: the runs of a ``built`` (a pack's) are all prepared before any trains."""
    torch.manual_seed(seed)
    if built is not None and seed in built:
        head, kwargs, rng = built[seed]
        torch.set_rng_state(rng)
        return copy.deepcopy(head), kwargs
    head, kwargs = build()
    if built is not None:
        built[seed] = (head, kwargs, torch.get_rng_state())
    return head, kwargs


def select_splits(config: TrainConfig, data: HeadData):
    """(sample ids, train, dev, test, the layers read, nu scores, the head's query layer): all from
    memory, fixed by the seed."""
    from ..layers import parse_layers

    spec = parse_layers(config.layers, num_layers=data.num_layers)
    ids, train = data.sample(shots=config.shots, seed=config.seed)
    if train.n_sentences == 0:
        raise LayerfuseError(f"the training sample of {data.path} is empty")
    fused, scores = choose_layers(spec, train, seed=config.seed)
    layers, query_layer = layers_read(config, fused, num_layers=data.num_layers)
    dev = data.dev.take_layers(layers)
    if config.dev_sentences and config.dev_sentences < dev.n_sentences:
        dev = dev.select(dev_subset(dev.n_sentences, config.dev_sentences))
    test = data.test.take_layers(layers) if data.test is not None else None
    return ids, train.take_layers(layers), dev, test, layers, scores, query_layer


def dev_subset(n_dev: int, size: int) -> np.ndarray:
    """The positions in dev of the ``--dev-sentences size`` subset, in order: one fixed subset for every run
    (seed 0, not the run's seed), so runs stay comparable."""
    return np.sort(np.random.default_rng(0).choice(n_dev, size, replace=False))


def layers_read(config: TrainConfig, fused, *, num_layers: int) -> tuple[tuple[int, ...], str]:
    """(the layers a run holds, z_L last; the query layer its head is built with): the fused layers,
    then the backbone's top layer apart when ``--query-layer top`` reads it and it is not the last
    fused one (the head built with ``query_layer="top"``: that slice is z_L alone, not fused)."""
    z_l = (*config.query_layers(num_layers), fused[-1])[0]
    if FUSIONS[config.fusion].top_layer_only:
        # Base and the extra layers read z_L alone: batches of every fused layer would gather and
        # widen L times the bytes they use.
        return (z_l,), "fused"
    if z_l == fused[-1]:
        return tuple(fused), "fused"
    return (*fused, z_l), "top"


def build_optimizer(config: TrainConfig, model: torch.nn.Module, *, total_steps: int, groups: list | None = None):
    """AdamW (no decay on biases and norms) and the linear warmup-then-decay-to-zero schedule.
    ``groups``: AdamW's groups in place of ``model``'s (`param_groups`): a pack's flat weights."""
    optimizer = torch.optim.AdamW(groups or param_groups(config, model), lr=config.max_lr,
                                  fused=True)  # one kernel per step: a third of a small head's step time on CPU
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(config, total_steps))


def param_groups(config: TrainConfig, model: torch.nn.Module) -> list[dict]:
    """AdamW's two groups for ``model`` at ``config``'s rate: weight decay on weights, none on biases
    and norms (`decays_weight`)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (decay if decays_weight(name, p) else no_decay).append(p)
    return [{"params": decay, "weight_decay": config.weight_decay, "lr": config.max_lr},
            {"params": no_decay, "weight_decay": 0.0, "lr": config.max_lr}]


def decays_weight(name: str, p: torch.Tensor) -> bool:
    """Whether AdamW decays the parameter ``name`` of a module: weights yes, biases and norms no."""
    return not (p.ndim < 2 or "bias" in name or "norm" in name)


def lr_schedule(config: TrainConfig, total_steps: int):
    """The multiplier of the rate after ``step`` optimizer steps: linear warmup, then linear decay to
    zero at ``total_steps``. A warmup as long as the run is refused: it was cut to the run's length in
    silence, the rate never decayed, and the record named the warmup asked for."""
    if 0 < total_steps <= config.warmup:
        raise LayerfuseError(f"warmup {config.warmup} is not shorter than the run's {total_steps} optimizer steps "
                             "(epochs x its sentences / (batch size x grad accumulation)): no step would decay "
                             "the rate; use a shorter warmup")
    warmup = config.warmup

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return schedule


def train_step(run: Run, step_order: np.ndarray) -> None:
    """One optimizer step over ``step_order`` (micro-batches of batch_size, gradients accumulated).

    The step's loss is the mean over every scored row of the step, as one batch of them all would have
    it: with several micro-batches each adds its rows' summed loss, and the gradients are divided by the
    step's row count once they are all in (on the device: no sync). Weighting each micro-batch's mean by
    its sentences instead let `--grad-accum 2` train otherwise than twice the batch."""
    config, packed = run.config, packable(run.head)  # packed: no padding but to a multiple of PACK_MULTIPLE
    run.optimizer.zero_grad(set_to_none=True)
    micros = [step_order[m:m + config.batch_size] for m in range(0, len(step_order), config.batch_size)]
    summed = rows = 0  # over the micro-batches: their rows' summed loss, their scored rows
    for micro in micros:
        with run.autocast():
            batch = run.train.batch(micro, device=run.device, packed=packed, multiple=PACK_MULTIPLE)
            logits, targets = run.task.outputs(run.head, batch)  # [N, classes], [N]: the rows the task scores
        loss = batch_loss(logits, targets)
        if len(micros) == 1:
            run.scaler.scale(loss).backward()
            continue
        scored = (targets != IGNORE).sum()
        run.scaler.scale(loss * scored).backward()
        summed, rows = summed + loss.detach() * scored, rows + scored
    if len(micros) > 1:
        rows = rows.clamp(min=1).float()
        for p in run.model.parameters():
            if p.grad is not None:
                p.grad.div_(rows)
        loss = summed / rows
    if config.max_grad_norm > 0:
        run.scaler.unscale_(run.optimizer)
        torch.nn.utils.clip_grad_norm_([p for p in run.model.parameters() if p.requires_grad], config.max_grad_norm)
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.scheduler.step()
    run.last_loss = loss.detach()


@dataclass
class Book:
    """The run's record: each evaluation, the best dev point (and its weights), the clock."""

    log: object = None
    evals: list = field(default_factory=list)
    # rank: the task's "higher is better" number of the best dev scores (NER: F1; MLM: -loss)
    best: dict = field(default_factory=lambda: {"rank": -math.inf, "scores": None, "step": 0, "epoch": 0})
    best_state: dict | None = None
    test: dict | None = None  # the test scores of the head at its best dev point
    clock: dict = field(default_factory=lambda: {"train": 0.0, "eval": 0.0})
    loss_sum: torch.Tensor | None = None
    loss_n: int = 0
    on_eval: object = None  # called with each evaluation's record (a progress bar)

    def note(self, run: Run, scores: dict, *, step: int, epoch: int, state) -> None:
        """Record one evaluation's ``scores``; ``state()`` (the weights, copied here) when it is the best
        so far."""
        train_loss = float(self.loss_sum) / self.loss_n if self.loss_n else None
        refuse_non_finite_features(run, run.dev, scores, train_loss=train_loss)
        self.evals.append({"step": step, "epoch": epoch, "train_loss": train_loss,
                           **{f"dev_{name}": value for name, value in scores.items()}})
        self.loss_sum, self.loss_n = None, 0
        if run.task.rank(scores) > self.best["rank"]:  # first best wins ties
            self.best.update(rank=run.task.rank(scores), scores=scores, step=step, epoch=epoch,
                             index=len(self.evals) - 1)
            # Kept (a copy of the head, and of the backbone in FT): test, layer usage and the returned
            # head all come from the best dev point.
            self.best_state = {k: v.detach().clone() for k, v in state().items()}
        if self.log:
            self.log(f"step {step} epoch {epoch}: {run.task.describe(scores)}")
        if self.on_eval:
            self.on_eval(self.evals[-1])

    def restore_best(self, run: Run) -> None:
        if self.best_state is not None:
            run.model.load_state_dict(self.best_state)
        run.model.eval()


def refuse_non_finite_features(run: Run, split: Split, scores: dict, *, train_loss: float | None) -> None:
    """An evaluation of ``split`` whose loss, or the training loss before it, is not finite, on cached features
    holding nan or inf (the training sample's, or ``split``'s): one line naming the split and its layers. No
    learning rate mends them, and a score computed from them is no result. Otherwise the head diverged: its
    run's to record (`diverged_at`). The features are read only once a loss is not finite."""
    lost, scored = train_loss is not None and not math.isfinite(train_loss), math.isfinite(scores["loss"])
    for part, bad in ((run.train, lost), (split, not scored)):
        layers = non_finite_layers(part, device=run.device, batch_size=run.eval_batch_size) if bad else []
        if layers:
            where = run.data.path
            raise LayerfuseError(f"split {part.name} of the cache entry {where} holds nan or inf hidden states "
                                 f"(layer{'s' * (len(layers) > 1)} {', '.join(map(str, layers))}; 0 = embeddings): "
                                 f"no head trains or scores on them; `layerfuse verify {where}` names every damaged "
                                 "split and layer: re-extract the entry")


def _score(run: Run, split: Split) -> dict:
    return run.task.score(run.head, split, data=run.data, device=run.device, batch_size=run.eval_batch_size,
                          autocast=run.autocast())
