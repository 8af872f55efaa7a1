"""What one run is (`TrainConfig`, one field per `train-head` option, and the fusions' own settings)
and what it reports (`RunResult`, the JSON record). Every result and checkpoint stores
`TrainConfig.record`: the fields, and every fusion's setting, by name."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from numbers import Integral, Real

import numpy as np

from ..errors import LayerfuseError, OptionError
from ..fusions.config import LM_HIDDEN_ACT, LM_LAYER_NORM_EPS, QUERY_LAYERS, FusionConfig
from ..fusions.fusion import FE_LR
from ..fusions.options import takes_options
from ..fusions.registry import FUSIONS, check_option_names, declared_options
from ..layers.spec import ranking_rule
from ..precision import DEFAULT_PRECISION
from ..precision import PRECISIONS as PRECISION_TABLE
from ..seeds import SEED_LIMIT, is_seed
from ..tasks import DEFAULT_TASK, TASKS, task_of

PAPER_LR = 5e-5  # the paper's learning rate (§5): AdamW, linear decay to zero; FT's default
FE_LR_BY_FUSION = {name: cls.fe_lr for name, cls in FUSIONS.items() if cls.fe_lr != FE_LR}  # the exceptions, for help
PRECISIONS = tuple(PRECISION_TABLE)  # the names (`layerfuse.precision` holds what each means)


@takes_options
@dataclass(frozen=True)
class TrainConfig:
    """One run; each field is one `train-head` option. The head's defaults are `FusionConfig`'s and
    the fusions' declarations (`Fusion.options`): a fusion's setting is a keyword of the constructor
    (``TrainConfig(..., name=value)``) and an attribute (``config.name``), kept in ``options``."""

    fusion: str
    shots: int | None  # N of an N-way few-shot sample (N * C sentences; MLM: N blocks); None = all of train
    epochs: int  # epoch cap; 0 evaluates the untrained head
    seed: int
    lr: float | None = None  # None = the default: `default_lr` (FE: per fusion; FT: the paper's)
    batch_size: int = 16
    eval_every: int | None = None  # in optimizer steps; None = once per epoch
    eval_points: int | None = None  # evenly spaced evaluations over the run instead (sweeps); last = the end
    dev_sentences: int | None = None  # evaluate on this fixed random subset of dev (sweeps); None = all
    layers: str | None = None  # "4,8,12", "1..6", "auto:K" or "xie:K"; None = 1..L (see layerfuse.layers.spec)
    dropout: float = FusionConfig.dropout
    weight_decay: float = 0.01
    warmup: int = 0  # optimizer steps of linear warmup
    device: str | None = None  # None = cuda when available, else cpu
    max_grad_norm: float = 1.0  # 0 = no clipping
    mode: str = "fe"  # fe: heads on cached states; ft: the backbone fine-tunes end to end with the head
    freeze: str | None = None  # ft: "embeddings", or k = the embeddings and the bottom k layers
    grad_accum: int = 1  # micro-batches of batch_size per optimizer step
    precision: str = DEFAULT_PRECISION  # autocast for forward passes: fp32 | bf16 | fp16 (fp16: CUDA, loss scaling)
    # z_L (DWAtt's query and residual, Base's output, the extra layers' input): the last fused layer
    # (fused), or the backbone's top layer (top), read even when it is not fused; concat and scalarmix have none.
    query_layer: str = FusionConfig.query_layer
    task: str = DEFAULT_TASK  # a name in layerfuse.tasks.TASKS: ner tags words (F1); mlm predicts masked tokens
    # the entry's label set to learn (`layerfuse.cache.label_sets`): ner, pos, chunk, upos, ...; None = its primary.
    # Span sets score span F1, token sets (POS) token accuracy.
    labels: str | None = None
    # the fusions' own settings given away from their defaults, (name, value) pairs (`fusion_option`
    # reads one, the default included)
    options: tuple = ()

    def __post_init__(self):
        self._check_fusion()
        if self.shots == "all":  # as --shots all and load_for_run say it
            object.__setattr__(self, "shots", None)
        self._check_types()
        object.__setattr__(self, "layers", _layers_text(self.layers))
        if not FUSIONS[self.fusion].reads_query_layer:  # no z_L: --query-layer changes nothing, so the run says fused
            object.__setattr__(self, "query_layer", FusionConfig.query_layer)
        for name, value, ok, rule in self._checks():
            if not ok:
                raise OptionError(f"{name} must be {rule}, got {value!r}")
        check_option_names(name for name, _ in self.options)
        declared = declared_options()
        for name, value in self.options:
            declared[name].check(value)
        object.__setattr__(self, "options", tuple((name, value) for name, value in self.options
                                                  if value != declared[name].default))

    def fusion_option(self, name: str):
        """The value of the fusions' setting ``name``: as given, else its declared default."""
        check_option_names([name])
        return dict(self.options).get(name, declared_options()[name].default)

    def fusion_options(self) -> dict:
        """Every fusion's setting, by name, as this run has it."""
        return {name: self.fusion_option(name) for name in declared_options()}

    def head_options(self, num_layers: int) -> dict:
        """The settings a head is built with on a backbone of ``num_layers`` layers (a default picked
        by depth, picked)."""
        given = dict(self.options)
        return {name: option.value(given, num_layers=num_layers) for name, option in declared_options().items()}

    def __getattr__(self, name: str):
        """A fusion's setting, as an attribute (``config.name``); called for no other name."""
        if name.startswith("_") or name not in declared_options():
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self.fusion_option(name)

    @property
    def max_lr(self) -> float:
        """The learning rate this run uses: ``lr``, or the default for its fusion and mode."""
        return self.lr if self.lr is not None else default_lr(self.fusion, self.mode)

    def record(self) -> dict:
        """``asdict`` with every fusion's setting by name (instead of ``options``) and the learning rate
        that ran, so a record says what it did."""
        fields = {k: v for k, v in asdict(self).items() if k != "options"}
        return {**fields, **self.fusion_options(), "lr": self.max_lr}

    @property
    def ranked_by(self) -> str | None:
        """The rule that ranks layers by nu for this run (``auto`` or ``xie``), or None."""
        return ranking_rule(self.layers)

    def query_layers(self, num_layers: int) -> tuple[int, ...]:
        """The layer a run reads for z_L beyond the layers it fuses: the backbone's top one for
        ``query_layer="top"`` where the fusion has a z_L (`Fusion.reads_query_layer`), else none."""
        return (num_layers,) if self.query_layer == "top" and FUSIONS[self.fusion].reads_query_layer else ()

    def _check_fusion(self) -> None:
        """A registered fusion, whose options are not named as a run setting (the run's value would be
        recorded, the option's used: one name, two values)."""
        taken = sorted({o.name for o in fusion_class(self.fusion).options} & {f.name for f in fields(TrainConfig)})
        if taken:
            raise LayerfuseError(f"fusion {self.fusion!r} declares option{'s' * (len(taken) > 1)} "
                                 f"{', '.join(taken)}, the name of a run setting: name it apart")

    def _check_types(self) -> None:
        """Whole numbers where a count is meant, numbers where a rate is: a float seed or a string rate
        failed deep inside the run (numpy's SeedSequence, a slice), a string N in a comparison here."""
        for name in INTEGER_FIELDS + NUMBER_FIELDS:
            value = getattr(self, name)
            if isinstance(value, np.generic):  # numpy's numbers as Python's: they failed later, as JSON or a seed
                value = value.item()
                object.__setattr__(self, name, value)
            kind = Integral if name in INTEGER_FIELDS else Real
            if (value is not None or name in REQUIRED_NUMBERS) and (isinstance(value, bool)
                                                                    or not isinstance(value, kind)):
                what = "an integer" if kind is Integral else "a number"
                raise OptionError(f"{name} must be {what}{' or all' if name == 'shots' else ''}, got {value!r}")

    def _checks(self):
        optional_positive = ("shots", "eval_every", "eval_points", "dev_sentences")
        for name in optional_positive:
            value = getattr(self, name)
            yield name, value, value is None or value >= 1, ">= 1" + (" or all" if name == "shots" else "")
        yield ("eval_points", self.eval_points, not (self.eval_points and self.eval_every),
               "left out with eval_every (one schedule: every K steps, or P evenly spaced points; both were merged)")
        yield "epochs", self.epochs, self.epochs >= 0, ">= 0"
        yield "seed", self.seed, is_seed(self.seed), f"in 0..{SEED_LIMIT - 1} (numpy's and torch's generators' range)"
        yield "lr", self.lr, self.lr is None or 0 < self.lr < math.inf, "finite and > 0"
        yield "batch_size", self.batch_size, self.batch_size >= 1, ">= 1"
        yield "grad_accum", self.grad_accum, self.grad_accum >= 1, ">= 1"
        yield "dropout", self.dropout, 0 <= self.dropout < 1, "in [0, 1)"
        for name in ("weight_decay", "warmup", "max_grad_norm"):
            yield name, getattr(self, name), 0 <= getattr(self, name) < math.inf, "finite and >= 0"
        yield "mode", self.mode, self.mode in ("fe", "ft"), "fe or ft"
        yield "task", self.task, self.task in TASKS, " or ".join(TASKS)
        if self.task in TASKS:  # auto:K ranks layers by tag classes
            yield ("layers", self.layers, task_of(self).labels_from_data or not self.ranked_by,
                   f"explicit for --task {self.task} (auto:K and xie rank layers by tag classes, which it has none of)")
        if self.labels is not None and self.task in TASKS:
            yield "labels", self.labels, task_of(self).labels_from_data, f"left out for --task {self.task}"
        yield "precision", self.precision, self.precision in PRECISIONS, "fp32, bf16 or fp16"
        yield "query_layer", self.query_layer, self.query_layer in QUERY_LAYERS, " or ".join(QUERY_LAYERS)
        # Xie's rule drops the layers above its pick, the backbone's top layer among them.
        yield ("query_layer", self.query_layer, not (self.query_layer == "top" and self.ranked_by == "xie"),
               "fused with --layers xie (the layers above the classifier's are dropped)")
        yield ("freeze", self.freeze, self.freeze is None or self.freeze == "embeddings" or str(self.freeze).isdigit(),
               "'embeddings' or a number of layers")
        yield ("freeze", self.freeze, self.freeze is None or self.mode == "ft",
               "left out without --mode ft (FE trains no backbone)")
        yield ("layers", self.layers, self.mode != "ft" or not self.ranked_by,
               "named with --mode ft (auto:K and xie rank the cached layers of a frozen backbone; e.g. --layers 1,2,3)")


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
    # Per evaluation point: NER {step, epoch, train_loss, dev_f1, dev_loss[, test_f1]};
    # MLM {step, epoch, train_loss, dev_loss, dev_ppl[, test_loss, test_ppl]}
    evals: list[dict]
    best_dev_f1: float | None  # NER; None for MLM
    best_step: int
    best_epoch: int
    test_f1_at_best: float | None
    seconds: dict  # {"total", "train", "eval"}
    device: str
    versions: dict
    # torch's CPU threads: a CPU run's sums are ordered by them, so another count gives other weights in the
    # last bits (and, after many steps, another best point); None in records written before it was kept
    threads: int | None = None
    tagger_kwargs: dict = field(default_factory=dict)  # TokenTagger(**tagger_kwargs) rebuilds the head
    backbone_params: int | None = None  # FT: the backbone's trainable parameters (beside the head's)
    layer_usage: dict | None = None  # which layers the head uses, at its best dev point (training.diagnostics)
    # MLM (lower is better): the best (lowest) dev loss, its perplexity exp(loss), and the test
    # perplexity of the head at that point; None for NER, and then left out of the record.
    best_dev_loss: float | None = None
    best_dev_ppl: float | None = None
    test_ppl_at_best: float | None = None
    # Token-level label sets (POS, UPOS, ...): best dev accuracy and test accuracy there, instead of F1.
    best_dev_accuracy: float | None = None
    test_accuracy_at_best: float | None = None
    # A label set other than the entry's primary one: its splits' label fingerprints (`label_sets.fingerprints_of`),
    # which a relabel changes while the entry's key stays; None, and then left out of the record, for the primary.
    labels_fingerprints: dict | None = None
    # The label set it trained on, by name, when that is not NER: ``config.labels`` is None for the entry's primary
    # set (a POS or chunk entry's too); None, and then left out of the record, for NER and MLM.
    label_set: str | None = None
    tagger: object = field(default=None, repr=False, compare=False)  # the head at its best dev point

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()
                if k != "tagger" and not (k in OPTIONAL_FIELDS and v is None)}  # NER records keep their old keys


def _layers_text(layers):
    """``layers`` as the text `--layers` takes: a number or a list of numbers (``[4, 8]``) is written
    ``"4,8"`` (a list made the config unhashable, so `grid` and a set of runs failed on it)."""
    if isinstance(layers, np.generic):
        layers = layers.item()
    if isinstance(layers, Integral) and not isinstance(layers, bool):
        return str(int(layers))
    if isinstance(layers, (list, tuple, np.ndarray)):
        items = [x.item() if isinstance(x, np.generic) else x for x in layers]
        if items and all(isinstance(x, Integral) and not isinstance(x, bool) for x in items):
            return ",".join(str(int(x)) for x in items)
    elif layers is None or isinstance(layers, str):
        return layers
    raise OptionError(f"layers must be text such as '4,8,12', a layer number or a list of them, got {layers!r}")


def diverged_at(evals: list[dict]) -> dict | None:
    """The first evaluation of a run (`RunResult.evals`, a record's ``evals``) whose training or dev loss is nan
    or inf: the run diverged by then. None: it did not. The dev loss counts too: a step can throw the weights so
    far that the head's logits overflow while the loss of that step, taken before it, was finite (the training
    loop refuses features holding nan or inf, so a dev loss that is not finite is the head's)."""
    return next((e for e in evals if not all(_finite_loss(e, k) for k in ("train_loss", "dev_loss"))), None)


def _finite_loss(evaluation: dict, key: str) -> bool:
    """Whether the loss ``key`` of one evaluation is finite, or absent. A record holds nan or inf as null
    (valid JSON has neither; records of earlier releases wrote NaN, which Python still reads); a training loss
    is null also at step 0, before any step, and is finite there."""
    value = evaluation.get(key)
    if value is None:
        return key not in evaluation or (key == "train_loss" and not evaluation.get("step"))
    return math.isfinite(value)


MLM_FIELDS = ("best_dev_loss", "best_dev_ppl", "test_ppl_at_best")
OPTIONAL_FIELDS = (*MLM_FIELDS, "best_dev_accuracy", "test_accuracy_at_best", "labels_fingerprints", "label_set")


# The fields that count (whole numbers) and those that measure (numbers); the others may be None.
INTEGER_FIELDS = ("shots", "epochs", "seed", "batch_size", "eval_every", "eval_points", "dev_sentences", "warmup",
                  "grad_accum")
NUMBER_FIELDS = ("lr", "dropout", "weight_decay", "max_grad_norm")
REQUIRED_NUMBERS = ("epochs", "seed", "batch_size", "warmup", "grad_accum", "dropout", "weight_decay", "max_grad_norm")


def default_lr(fusion: str, mode: str = "fe") -> float:
    """FT: the paper's 5e-5; FE: the fusion's own (`Fusion.fe_lr`)."""
    return PAPER_LR if mode == "ft" else fusion_class(fusion).fe_lr


def fusion_class(name: str):
    """``FUSIONS[name]``, or one line: a worker process (which unpickles configs without checking them) knows
    only the fusions registered when the modules it imports are, not under ``if __name__ == "__main__":``.
    Not an `OptionError`: the name may come from a results file or a head (the command line's are checked by
    click and `cli.options`)."""
    if name not in FUSIONS:
        raise LayerfuseError(f"unknown fusion {name!r}; choose one of {', '.join(FUSIONS)} (a fusion of your own "
                          "must be registered when its module is imported, for worker processes to know it)")
    return FUSIONS[name]


def tagger_kwargs(config: TrainConfig, meta: dict, *, n_layers: int) -> dict:
    """The `TokenTagger` arguments of a run on a cache entry with metadata ``meta``."""
    return {
        "fusion": config.fusion,
        "n_layers": n_layers,
        "dim": int(meta["hidden_size"]),
        "num_heads": int(meta["num_heads"]),
        "ffn_dim": int(meta["ffn_dim"]),
        "n_labels": len(meta["label_names"]),
        **config.head_options(int(meta["num_layers"])),
        "dropout": config.dropout,
        # written only when set: the checkpoints of heads without a z_L slice stay as they were
        **({"query_layer": config.query_layer} if config.query_layer != FusionConfig.query_layer else {}),
    }


def masked_lm_kwargs(config: TrainConfig, meta: dict, *, n_layers: int) -> dict:
    """The `FusedMaskedLM` arguments of an MLM run on a cache entry with metadata ``meta``: the
    fusion's, plus the vocabulary and the backbone's LayerNorm epsilon and activation (its MLM head's)."""
    kwargs = {k: v for k, v in tagger_kwargs(config, {**meta, "label_names": []}, n_layers=n_layers).items()
              if k != "n_labels"}
    if not meta.get("vocab_size"):
        raise LayerfuseError(f"the cache entry {meta.get('key')!r} has no vocab_size: it is not an MLM entry "
                              f"(extract it with --task mlm)")
    return {**kwargs, "vocab_size": int(meta["vocab_size"]),
            "layer_norm_eps": float(meta.get("layer_norm_eps") or LM_LAYER_NORM_EPS),
            "hidden_act": str(meta.get("hidden_act") or LM_HIDDEN_ACT)}
