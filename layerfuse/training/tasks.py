"""What differs between the heads' objectives in training, so one training loop serves both: which
head a task trains (its class itself, `head_class`), how it is built, which rows of a batch are
scored, how a split is scored, and which evaluation is best. The tasks themselves (their names and
what the rest of the library asks of them) are `layerfuse.tasks`, which lies below the heads and
cannot name them; `TRAINING` is the one registry where a task meets its head, keyed by the
`layerfuse.tasks.Task` object, each entry holding its task (`training_of(task)` finds it).

- ``ner``: a `TokenTagger` over every word; dev/test seqeval micro-F1, higher is better.
- ``mlm``: a `FusedMaskedLM` over the masked rows only (labels != IGNORE), its decoder tied to the
  backbone's input embeddings; dev/test perplexity exp(mean cross-entropy over the masked rows),
  best = lowest dev loss.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from .. import tasks
from ..cache.label_sets import SPAN, TOKEN, primary_name
from ..device import accumulator_dtype
from ..display import f1_points
from ..errors import LayerfuseError
from ..fusions import FusedMaskedLM, TokenTagger
from ..tasks import task_of
from .arrays import IGNORE
from .config import TrainConfig, masked_lm_kwargs, tagger_kwargs
from .evaluation import eval_batches, score, score_heads


def training_task(config: TrainConfig, meta: dict, *, where: str | None = None):
    """The training behaviour of ``config``'s task, checked against the cache entry it trains on
    (``meta``, at ``where``)."""
    wanted, cached = task_of(config), task_of(meta)
    if cached is not wanted:
        raise LayerfuseError(f"task {wanted.name!r} needs a {wanted.name} cache entry, but {where or meta.get('key')} "
                              f"holds {cached.name!r} data (pass --task {cached.name} to train on it, or extract with "
                              f"--task {wanted.name})")
    _check_label_set(config, meta, where=where)
    return training_of(wanted)


def _check_label_set(config: TrainConfig, meta: dict, *, where: str | None) -> None:
    """The data must be seen through the set the config names (None: the primary): the Python API loads
    data and config apart, and trained one set while recording the other."""
    held = meta.get("label_set")
    if held is None or not task_of(config).labels_from_data:
        return
    wanted = config.labels or primary_name(meta)
    if wanted != held:
        raise LayerfuseError(f"the config trains label set {wanted!r} but the data from {where or meta.get('key')} "
                             f"holds {held!r}: load it through entry.with_labels({config.labels!r}), or set "
                             f"labels={held!r}")


def training_of(task):
    """What differs in the training loop for ``task`` (a `Task`, or anything `task_of` reads)."""
    return TRAINING[task_of(task)]


def head_class(task) -> type:
    """The class of ``task``'s heads (a `Task`, or anything `task_of` reads), as its entry declares."""
    return training_of(task).head_class


def batch_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits [N, C]`` against ``targets [N]`` (IGNORE rows left out), in float32."""
    if targets.numel() == 0:  # an MLM batch whose blocks drew no mask: nothing to learn, no NaN
        return logits.float().sum() * 0
    return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE)


class NER:
    """Tagging: the headline is F1 (best_dev_f1, test_f1_at_best)."""

    task = tasks.NER
    head_class = TokenTagger

    def head(self, config: TrainConfig, data, *, n_layers: int, device, backbone) -> tuple[torch.nn.Module, dict]:
        kwargs = tagger_kwargs(config, data.meta, n_layers=n_layers)
        return self.head_class(**kwargs).to(device), kwargs

    def outputs(self, head, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [B*T, n_labels], tags [B*T]) of every row; padding and non-first subwords are IGNORE."""
        logits = head(batch.hidden, batch.mask, batch.lengths)  # [B, T, n_labels]
        return logits.flatten(0, 1), batch.labels.flatten()

    def score(self, head, split, *, data, device, batch_size: int, autocast) -> dict:
        """{"f1", "loss"}; a token-level label set (POS: ``meta["label_kind"] == "token"``) {"accuracy", "loss"}."""
        kind = data.meta.get("label_kind", SPAN)
        value, loss = score(head, split, device=device, label_names=data.label_names, batch_size=batch_size,
                            autocast=autocast, kind=kind)
        return {"accuracy" if kind == TOKEN else "f1": value, "loss": loss}

    def score_heads(self, forward, n_heads: int, split, *, data, device, batch_size: int, autocast,
                    token_wise: bool = False) -> list[dict]:
        """`score` of each of ``n_heads`` heads whose logits ``forward(hidden, mask)`` stacks (a pack), each
        batch of ``split`` built once for all of them (token-wise heads: its held rows in order)."""
        kind = data.meta.get("label_kind", SPAN)
        scores = score_heads(forward, n_heads, split, device=device, label_names=data.label_names,
                             batch_size=batch_size, autocast=autocast, kind=kind, token_wise=token_wise)
        return [{"accuracy" if kind == TOKEN else "f1": value, "loss": loss} for value, loss in scores]

    def rank(self, scores: dict) -> float:
        """Higher is better; the first of equal evaluations stays the best."""
        return scores.get("f1", scores.get("accuracy"))

    def test_record(self, scores: dict) -> dict:
        return {f"test_{_metric(scores)}": scores[_metric(scores)]}

    def summary(self, best: dict | None, test: dict | None) -> dict:
        """The `RunResult` fields of the best dev evaluation and the test scores there."""
        if best and _metric(best) == "accuracy":
            return {"best_dev_f1": None, "test_f1_at_best": None, "best_dev_accuracy": best["accuracy"],
                    "test_accuracy_at_best": test["accuracy"] if test else None}
        return {"best_dev_f1": best["f1"] if best else -1.0, "test_f1_at_best": test["f1"] if test else None}

    def describe(self, scores: dict) -> str:
        name = "F1" if _metric(scores) == "f1" else "accuracy"
        return f"dev {name} {f1_points(scores[_metric(scores)])} loss {scores['loss']:.4f}"


def _metric(scores: dict) -> str:
    """The tagging metric a scores dict holds: span F1 or (token label sets) accuracy."""
    return "accuracy" if "accuracy" in scores else "f1"


class MLM:
    """Masked language modelling: the headline is perplexity (best_dev_ppl, test_ppl_at_best)."""

    task = tasks.MLM
    head_class = FusedMaskedLM

    def head(self, config: TrainConfig, data, *, n_layers: int, device, backbone) -> tuple[torch.nn.Module, dict]:
        """A `FusedMaskedLM` starting from the backbone's own MLM head when the cache holds one;
        the decoder is the backbone's embedding parameter (FT) or a frozen copy of it (FE)."""
        kwargs = masked_lm_kwargs(config, data.meta, n_layers=n_layers)
        head = self.head_class(**kwargs)
        head.lm.load_pretrained(data.lm)
        head = head.to(device)
        if backbone is not None:
            head.lm.tie(backbone.model.get_input_embeddings().weight)
        elif "embeddings" in data.lm:
            head.lm.freeze_to(torch.as_tensor(data.lm["embeddings"]).to(device))
        else:
            raise LayerfuseError(f"{data.path} holds no lm/embeddings for the tied decoder; "
                                  "re-extract it with --task mlm")
        return head, kwargs

    def outputs(self, head, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [R, vocab], token ids [R]) of the R masked rows alone: the vocabulary product never
        sees the other 85% of the rows."""
        rows = batch.labels != IGNORE  # [B, T]
        return head(batch.hidden, batch.mask, batch.lengths, rows=rows), batch.labels[rows]

    def score(self, head, split, *, data, device, batch_size: int, autocast) -> dict:
        """Mean cross-entropy over the split's masked rows and its perplexity, exp(mean)."""
        head.eval()
        acc = accumulator_dtype(device)  # float64, or float32 where the device has none (MPS)
        loss_sum = torch.zeros((), device=device, dtype=acc)
        n = 0
        with torch.no_grad(), autocast or contextlib.nullcontext():  # no_grad: autocast's weight casts kept
            for batch in eval_batches(split, device=device, batch_size=batch_size):
                logits, targets = self.outputs(head, batch)  # [R, vocab], [R]
                loss_sum += F.cross_entropy(logits.float(), targets, reduction="sum").to(acc)
                n += len(targets)
        if n == 0:
            raise LayerfuseError(f"split {split.name!r} has no masked tokens to score")
        loss = float(loss_sum) / n
        return {"loss": loss, "ppl": _exp(loss)}

    def rank(self, scores: dict) -> float:
        return -scores["loss"]

    def test_record(self, scores: dict) -> dict:
        return {"test_loss": scores["loss"], "test_ppl": scores["ppl"]}

    def summary(self, best: dict | None, test: dict | None) -> dict:
        return {"best_dev_f1": None, "test_f1_at_best": None, "best_dev_loss": best["loss"] if best else None,
                "best_dev_ppl": best["ppl"] if best else None, "test_ppl_at_best": test["ppl"] if test else None}

    def describe(self, scores: dict) -> str:
        return f"dev perplexity {scores['ppl']:.2f} loss {scores['loss']:.4f}"


def _exp(loss: float) -> float:
    return math.exp(loss) if loss < 700 else float("inf")  # a diverged head: inf, not an OverflowError


TRAINING = {entry.task: entry for entry in (NER(), MLM())}  # by the `layerfuse.tasks.Task` itself
