"""Training one head on cached hidden states (FE mode): one explicit function, no trainer framework.

Protocol (paper §5, §9): the seed fixes the few-shot sample, the head's initialisation and the
batch order; AdamW; the learning rate decays linearly from its maximum to zero over
``epochs * steps_per_epoch`` (after an optional linear warmup); seqeval micro-F1 (default,
conlleval-compatible mode) on dev at each evaluation point; the best dev F1 is reported, with the
test F1 at that point when the cache has a test split. On CPU a run is deterministic for a seed.

Threads: ``LAYERCACHE_NUM_THREADS`` sets torch's intra-op threads, for sweeps that run several
processes side by side; unset, torch's default is left alone.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from layercache.errors import LayercacheError

from . import FUSIONS
from .data import IGNORE, HeadData, SplitArrays, choose_layers, parse_layer_spec


PACK_MULTIPLE = 32  # training batches are padded to a multiple of this many rows (see SplitArrays.batch)


@dataclass(frozen=True)
class TrainConfig:
    """One run; each field is one `train-head` option."""

    fusion: str
    shots: int | None  # N of an N-way few-shot sample (N * C sentences); None = all of train
    epochs: int  # epoch cap; 0 evaluates the untrained head
    seed: int
    lr: float = 5e-5
    batch_size: int = 16
    eval_every: int | None = None  # in optimizer steps; None = once per epoch
    eval_points: int | None = None  # evenly spaced evaluations over the run instead (sweeps); last = the end
    dev_sentences: int | None = None  # evaluate on this fixed random subset of dev (sweeps); None = all
    layers: str | None = None  # "4,8,12", "1..6" or "auto:K"; None = 1..L
    extra_layers: int | None = None  # extra: None = 1 if L <= 12 else 2 (paper Table 2)
    dropout: float = 0.1
    weight_decay: float = 0.01
    warmup: int = 0  # optimizer steps of linear warmup
    device: str | None = None  # None = cuda when available, else cpu
    max_grad_norm: float = 1.0  # 0 = no clipping
    mode: str = "fe"  # fe: heads on cached states; ft: the backbone fine-tunes end to end with the head
    freeze: str | None = None  # ft: "embeddings", or k = the embeddings and the bottom k layers
    grad_accum: int = 1  # micro-batches of batch_size per optimizer step
    precision: str = "fp32"  # autocast for forward passes: fp32 | bf16 | fp16 (fp16: CUDA, with loss scaling)

    def __post_init__(self):
        if self.fusion not in FUSIONS:
            raise LayercacheError(f"unknown fusion {self.fusion!r}; choose one of {', '.join(FUSIONS)}")
        checks = [
            ("shots", self.shots, self.shots is None or self.shots >= 1, ">= 1 or all"),
            ("epochs", self.epochs, self.epochs >= 0, ">= 0"),
            ("lr", self.lr, self.lr > 0, "> 0"),
            ("batch_size", self.batch_size, self.batch_size >= 1, ">= 1"),
            ("eval_every", self.eval_every, self.eval_every is None or self.eval_every >= 1, ">= 1"),
            ("eval_points", self.eval_points, self.eval_points is None or self.eval_points >= 1, ">= 1"),
            ("dev_sentences", self.dev_sentences, self.dev_sentences is None or self.dev_sentences >= 1, ">= 1"),
            ("extra_layers", self.extra_layers, self.extra_layers is None or self.extra_layers >= 1, ">= 1"),
            ("dropout", self.dropout, 0 <= self.dropout < 1, "in [0, 1)"),
            ("weight_decay", self.weight_decay, self.weight_decay >= 0, ">= 0"),
            ("warmup", self.warmup, self.warmup >= 0, ">= 0"),
            ("max_grad_norm", self.max_grad_norm, self.max_grad_norm >= 0, ">= 0"),
            ("mode", self.mode, self.mode in ("fe", "ft"), "fe or ft"),
            ("grad_accum", self.grad_accum, self.grad_accum >= 1, ">= 1"),
            ("precision", self.precision, self.precision in ("fp32", "bf16", "fp16"), "fp32, bf16 or fp16"),
            ("freeze", self.freeze, self.freeze is None or self.freeze == "embeddings" or str(self.freeze).isdigit(),
             "'embeddings' or a number of layers"),
        ]
        for name, value, ok, rule in checks:
            if not ok:
                raise LayercacheError(f"{name} must be {rule}, got {value!r}")


@dataclass
class RunResult:
    """What a run reports; `to_dict()` is the JSON record (the trained head itself is not in it)."""

    config: dict
    cache_key: str | None
    cache_path: str
    model: str | None
    dataset: str | None
    layers: list[int]
    layer_scores: list[list] | None  # auto:K: [[layer, nu], ...] on the run's sample
    n_train_sentences: int
    n_train_words: int
    sample_fingerprint: str  # sha1 of the sampled sentence ids, for comparing samples across runs
    params: int
    steps_per_epoch: int
    total_steps: int
    evals: list[dict]  # {step, epoch, train_loss, dev_f1, dev_loss[, test_f1]} per evaluation point
    best_dev_f1: float
    best_step: int
    best_epoch: int
    test_f1_at_best: float | None
    seconds: dict  # {"total", "train", "eval"}
    device: str
    versions: dict
    tagger_kwargs: dict = field(default_factory=dict)  # TokenTagger(**tagger_kwargs) rebuilds the head
    tagger: object = field(default=None, repr=False, compare=False)  # the head at its best dev point

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "tagger"}
        return out


def versions() -> dict:
    """Library versions stored with every result and checkpoint."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("layercache", "torch", "numpy", "seqeval", "safetensors"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["python"] = sys.version.split()[0]
    return out


def default_extra_layers(num_layers: int) -> int:
    """Paper Table 2: one extra layer on a 12-layer backbone (or smaller), two on a 24-layer one."""
    return 1 if num_layers <= 12 else 2


def tagger_kwargs(config: TrainConfig, data: HeadData, layers) -> dict:
    meta = data.meta
    return {
        "fusion": config.fusion,
        "n_layers": len(layers),
        "dim": int(meta["hidden_size"]),
        "num_heads": int(meta["num_heads"]),
        "ffn_dim": int(meta["ffn_dim"]),
        "n_labels": len(meta["label_names"]),
        "extra_layers": config.extra_layers or default_extra_layers(int(meta["num_layers"])),
        "dropout": config.dropout,
    }


def resolve_precision(precision: str, device: str | None = None) -> str:
    """``auto`` -> ``bf16`` where the hardware multiplies bfloat16 natively (a CUDA GPU that supports
    it, or a CPU with AMX tiles: ~5x the float32 matrix throughput here), else ``fp32``; other values
    pass through. Sweeps use it, so a grid states the precision it actually ran at."""
    if precision != "auto":
        return precision
    import torch

    dev = pick_device(device)
    if dev.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if dev.type == "cpu" and _cpu_has_amx() else "fp32"


def _cpu_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return " amx_bf16" in f.read()
    except OSError:  # not Linux: stay with float32
        return False


def pick_device(name: str | None):
    import torch

    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def train_head(config: TrainConfig, data: HeadData, *, log=None, keep_tagger: bool = True) -> RunResult:
    """Sample, build, train and evaluate one head; returns its `RunResult`, with the head at its
    best dev point in ``.tagger`` unless ``keep_tagger`` is False (sweeps: no copies kept)."""
    import torch
    import torch.nn.functional as F

    from .memory import keep_freed_memory
    from .tagger import TokenTagger, count_parameters, packable

    t_start = time.perf_counter()
    keep_freed_memory()  # process-wide, once: steps reuse freed activations instead of page-faulting
    if os.environ.get("LAYERCACHE_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["LAYERCACHE_NUM_THREADS"]))
    device = pick_device(config.device)

    # The sample and the layers: both from memory, both fixed by the seed.
    spec = parse_layer_spec(config.layers, num_layers=data.num_layers)
    ids, train = data.sample(shots=config.shots, seed=config.seed)
    layers, scores = choose_layers(spec, train, seed=config.seed)
    train = train.take_layers(layers)
    dev = data.dev.take_layers(layers)
    if config.dev_sentences and config.dev_sentences < dev.n_sentences:
        # One fixed subset for every run (seed 0, not the run's seed), so runs stay comparable.
        keep = np.sort(np.random.default_rng(0).choice(dev.n_sentences, config.dev_sentences, replace=False))
        dev = dev.select(keep)
    test = data.test.take_layers(layers) if data.test is not None else None
    if train.n_sentences == 0:
        raise LayercacheError(f"the training sample of {data.path} is empty")

    kwargs = tagger_kwargs(config, data, layers)
    torch.manual_seed(config.seed)  # the seed fixes the initialisation (and the dropout masks)
    tagger = TokenTagger(**kwargs).to(device)
    n_params = count_parameters(tagger)
    # FT: the live backbone trains with the head, from its original weights in every run.
    backbone = _ft_backbone(config, data)
    model = torch.nn.ModuleList([tagger] + ([backbone] if backbone is not None else []))
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 or "bias" in name or "norm" in name else decay).append(p)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=config.lr,
                                  fused=True)  # one kernel per step: a third of a small head's step time on CPU
    per_step = config.batch_size * config.grad_accum
    steps_per_epoch = math.ceil(train.n_sentences / per_step)
    total = config.epochs * steps_per_epoch
    warmup = min(config.warmup, total)

    def schedule(step: int) -> float:  # multiplier of lr after `step` optimizer steps
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    order_gen = torch.Generator().manual_seed(config.seed)  # batch order, apart from dropout's RNG
    label_names = np.array(data.label_names)
    eval_batch = max(64, 4 * config.batch_size)

    evals: list[dict] = []
    best = {"dev_f1": -1.0, "step": 0, "epoch": 0, "test_f1": None, "state": None}
    clock = {"train": 0.0, "eval": 0.0}
    running = {"loss": torch.zeros((), device=device), "n": 0}

    autocast = _autocast(config, device)
    packed = packable(tagger)  # no padding but to a multiple of PACK_MULTIPLE rows
    scaler = torch.amp.GradScaler(device.type, enabled=config.precision == "fp16")

    def evaluate(step: int, epoch: int) -> None:
        t0 = _now(device)
        model.eval()
        dev_f1, dev_loss = _score(tagger, dev, device=device, label_names=label_names, batch_size=eval_batch,
                                  autocast=autocast)
        record = {"step": step, "epoch": epoch,
                  "train_loss": float(running["loss"]) / running["n"] if running["n"] else None,
                  "dev_f1": dev_f1, "dev_loss": dev_loss}
        running["loss"].zero_()
        running["n"] = 0
        if dev_f1 > best["dev_f1"]:  # first best wins ties
            best.update(dev_f1=dev_f1, step=step, epoch=epoch)
            if keep_tagger:
                best["state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
            if test is not None:
                record["test_f1"], _ = _score(tagger, test, device=device, label_names=label_names,
                                              batch_size=eval_batch, autocast=autocast)
                best["test_f1"] = record["test_f1"]
        evals.append(record)
        clock["eval"] += _now(device) - t0
        if log:
            log(f"step {step} epoch {epoch}: dev F1 {dev_f1:.4f} loss {dev_loss:.4f}")

    eval_at = set()
    if config.eval_points:
        eval_at = {max(1, round(total * k / config.eval_points)) for k in range(1, config.eval_points + 1)}
    eval_per_step = bool(config.eval_every or config.eval_points)

    step = 0
    if total == 0:
        evaluate(0, 0)
    for epoch in range(1, config.epochs + 1):
        t0 = _now(device)
        model.train()
        order = torch.randperm(train.n_sentences, generator=order_gen).numpy()
        for b in range(steps_per_epoch):
            step_order = order[b * per_step:(b + 1) * per_step]
            optimizer.zero_grad(set_to_none=True)
            for m in range(0, len(step_order), config.batch_size):  # gradient accumulation
                micro = step_order[m:m + config.batch_size]
                with autocast:
                    batch = train.batch(micro, device=device, packed=packed, multiple=PACK_MULTIPLE)
                    logits = tagger(batch.hidden, batch.mask, batch.lengths)  # [B, T, n_labels]
                loss = F.cross_entropy(logits.float().flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE)
                scaler.scale(loss * len(micro) / len(step_order)).backward()
            if config.max_grad_norm > 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad],
                                               config.max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            step += 1
            running["loss"] += loss.detach()
            running["n"] += 1
            if (config.eval_every and (step % config.eval_every == 0 or step == total)) or step in eval_at:
                clock["train"] += _now(device) - t0
                evaluate(step, epoch)
                model.train()
                t0 = _now(device)
        clock["train"] += _now(device) - t0
        if not eval_per_step:
            evaluate(step, epoch)

    if best["state"] is not None:
        model.load_state_dict(best["state"])
    model.eval()
    return RunResult(
        config=asdict(config),
        cache_key=data.meta.get("key"),
        cache_path=data.path,
        model=data.meta.get("model"),
        dataset=data.meta.get("dataset"),
        layers=[int(x) for x in layers],
        layer_scores=None if scores is None else [[int(l), float(nu)] for l, nu in scores],
        n_train_sentences=int(train.n_sentences),
        n_train_words=train.n_words,
        sample_fingerprint=hashlib.sha1(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()[:16],
        params=n_params,
        steps_per_epoch=steps_per_epoch,
        total_steps=total,
        evals=evals,
        best_dev_f1=best["dev_f1"],
        best_step=best["step"],
        best_epoch=best["epoch"],
        test_f1_at_best=best["test_f1"],
        seconds={"total": time.perf_counter() - t_start, "train": clock["train"], "eval": clock["eval"]},
        device=str(device),
        versions=versions(),
        tagger_kwargs=kwargs,
        tagger=tagger if keep_tagger else None,
    )


def _ft_backbone(config: TrainConfig, data):
    """The live backbone of FT mode, reset to its original weights and frozen as asked; None in FE."""
    backbone = getattr(data, "backbone", None)
    if config.mode == "fe":
        if backbone is not None:
            raise LayercacheError("FE mode trains on cached hidden states; this data is live (use mode ft)")
        return None
    if backbone is None:
        raise LayercacheError("FT mode needs the backbone: build the data with layercache.heads.ft.live_data")
    from .ft import freeze

    data.reset_backbone()
    freeze(backbone, config.freeze)
    return backbone


def _autocast(config: TrainConfig, device):
    import contextlib

    import torch

    if config.precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16 if config.precision == "bf16" else torch.float16)


def predict(tagger, split: SplitArrays, *, device, batch_size: int = 64) -> list[np.ndarray]:
    """Tag ids per sentence (argmax per evaluated row), in the split's sentence order."""
    import torch

    tagger.eval()
    preds: list = [None] * split.n_sentences
    order = split.length_order()
    with torch.inference_mode():
        for i in range(0, len(order), batch_size):
            pos = order[i:i + batch_size]
            batch = split.batch(pos, device=device)
            pred = tagger(batch.hidden, batch.mask).argmax(-1).cpu().numpy()  # [B, T]
            labels = batch.labels.cpu().numpy()
            for j, p in enumerate(pos):
                preds[p] = pred[j][labels[j] != IGNORE]
    return preds


def _score(tagger, split: SplitArrays, *, device, label_names: np.ndarray, batch_size: int,
           autocast=None) -> tuple[float, float]:
    """(seqeval micro-F1, mean token cross-entropy) of ``tagger`` on ``split``; forward passes under
    ``autocast`` (the run's precision) when given."""
    import contextlib

    import torch
    import torch.nn.functional as F

    tagger.eval()
    counts, preds = [], []
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    with torch.inference_mode(), autocast or contextlib.nullcontext():
        for batch in _eval_batches(split, device=device, batch_size=batch_size):
            logits = tagger(batch.hidden, batch.mask).float()  # [B, T, n_labels]
            loss_sum += F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(),
                                        ignore_index=IGNORE, reduction="sum").double()
            keep = batch.labels != IGNORE  # [B, T]
            counts.append(keep.sum(1).cpu().numpy())  # words per sentence
            preds.append(logits.argmax(-1)[keep].cpu().numpy())  # flat, sentence after sentence
    counts, preds = np.concatenate(counts), np.concatenate(preds)
    chunker = _Chunker.of(split, label_names)
    key = ("gold entities", tuple(label_names), batch_size)
    if key not in split._memo:  # the gold entities never change: chunk them once per split
        order = split.length_order()
        gold = np.concatenate([split.labels[split.offsets[p]:split.offsets[p + 1]] for p in order])
        split._memo[key] = chunker(gold[gold != IGNORE], counts)
    f1 = entity_f1(split._memo[key], chunker(preds, counts))
    return f1, float(loss_sum) / max(int(counts.sum()), 1)


EVAL_CACHE_BYTES = 1 << 30  # padded float32 eval batches up to this size are built once per split


def _eval_batches(split: SplitArrays, *, device, batch_size: int):
    """Length-sorted batches of ``split``; kept in memory across evaluations when small enough,
    since padding and widening the same dev set 25 times per run is wasted work."""
    order = split.length_order()
    key = ("eval batches", str(device), batch_size)
    starts = range(0, len(order), batch_size)
    if not getattr(split, "static", True):  # live (FT) states change as the backbone trains
        return (split.batch(order[i:i + batch_size], device=device) for i in starts)
    if key in split._memo:
        return split._memo[key]
    padded = sum(len(order[i:i + batch_size]) * int(split.lengths[order[i:i + batch_size]].max(initial=0))
                 for i in starts)
    nbytes = padded * split.hidden.shape[1] * split.hidden.shape[2] * 4
    if nbytes > EVAL_CACHE_BYTES:
        return (split.batch(order[i:i + batch_size], device=device) for i in starts)
    split._memo[key] = [split.batch(order[i:i + batch_size], device=device) for i in starts]
    return split._memo[key]


def entity_f1(gold: set, pred: set) -> float:
    """seqeval's micro-F1 (default mode, zero_division=0) from two sets of (type, start, end)."""
    tp = len(gold & pred)
    if tp == 0:
        return 0.0
    p, r = tp / len(pred), tp / len(gold)
    return float(2 * p * r / (p + r))


class _Chunker:
    """seqeval's default (conlleval) chunking of tag ids, vectorised.

    seqeval walks the tags one by one and asks ``end_of_chunk(prev, cur)`` and
    ``start_of_chunk(prev, cur)``; both depend only on the (previous, current) pair of tags, so they
    are tabulated once over the label set with seqeval's own functions and looked up for all
    positions at once. Sentences are joined with an ``O`` between them, as seqeval flattens them.
    """

    def __init__(self, label_names):
        from seqeval.metrics.sequence_labeling import end_of_chunk, start_of_chunk

        names = [str(n) for n in label_names] + ["O"]  # the last id: the separator between sentences
        tags = [n[0] for n in names]
        types = [n[1:].split("-", maxsplit=1)[-1] or "_" for n in names]
        K = len(names)
        self.sep = K - 1
        self.types = np.array(types, dtype=object)
        self.ends = np.array([[end_of_chunk(tags[a], tags[b], types[a], types[b]) for b in range(K)] for a in range(K)])
        self.starts = np.array([[start_of_chunk(tags[a], tags[b], types[a], types[b]) for b in range(K)]
                                for a in range(K)])

    @classmethod
    def of(cls, split: SplitArrays, label_names) -> "_Chunker":
        key = ("chunker", tuple(label_names))
        if key not in split._memo:
            split._memo[key] = cls(label_names)
        return split._memo[key]

    def __call__(self, ids: np.ndarray, counts: np.ndarray) -> set:
        """{(type, start, end)} of the flat tag ids of sentences with ``counts`` words each."""
        n = len(counts)
        seq = np.full(len(ids) + n + 1, self.sep, dtype=np.int64)  # a separator after each sentence, + seqeval's final O
        seq[np.arange(len(ids)) + np.repeat(np.arange(n), counts)] = ids
        prev = np.concatenate([[self.sep], seq[:-1]])
        ends = np.flatnonzero(self.ends[prev, seq])  # a chunk ends at i - 1
        starts = np.flatnonzero(self.starts[prev, seq])  # a chunk starts at i
        last = np.searchsorted(starts, ends, side="left") - 1  # the last start before i (checked before it)
        begins = np.where(last >= 0, starts[np.maximum(last, 0)], 0)
        return set(zip(self.types[prev[ends]].tolist(), begins.tolist(), (ends - 1).tolist()))


def _now(device) -> float:
    """Wall clock, after waiting for queued GPU work, so train and eval seconds are honest."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
    return time.perf_counter()
