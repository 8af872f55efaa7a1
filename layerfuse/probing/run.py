"""A probing run: for each label set and seed, a linear probe on every layer 0..L and a ScalarMix
probe over all of them, on the task's labels and (optionally) on its control task's; each probe a
record in ``<out>/probe.jsonl`` (see `records`), skipped when already there.

Memory stays bounded by one layer for the single-layer probes (train, dev and test vectors of that
layer, float32), and by the float16 [tokens, L + 1, d] of the train, dev and test tokens for the mix
(13 layers x 768 x 200k train tokens is 4 GB; float32, twice that, for a split whose values pass
float16's range); `ProbeConfig.max_train_tokens` caps the train part.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..cache.label_sets import SPAN, TOKEN, fingerprints_of, same_labels
from ..errors import LayerfuseError
from ..layers.variability import layer_variability
from ..training.metrics import Chunker
from ..versions import versions
from . import records as rec
from .control import ControlTask
from .data import Tokens, covered_splits, label_sets, label_view, n_way, sample_sentences, scored_tokens
from .expected import center_of_gravity
from .probe import LinearProbe, ProbeConfig, ScalarMixProbe, predict, score, train_probe

MIX = "mix"


@dataclass(frozen=True)
class Job:
    """One probe to train: a layer (or ``"mix"``), on task or control labels."""

    probe: int | str
    control: bool


def cache_info(entry) -> dict:
    """The entry as records name it: its key (else its folder's name), path, model and dataset."""
    key = entry.meta.get("key") or os.path.basename(str(entry.path).rstrip("/\\"))
    return {"key": key, "path": str(entry.path), "model": entry.meta.get("model"), "dataset": entry.meta.get("dataset")}


def plan(entry, *, control: bool) -> list[Job]:
    """Every probe of one (label set, seed): layers 0..L then the mix, each on task then control labels."""
    probes = [*range(entry.num_layers + 1), MIX]
    return [Job(p, c) for p in probes for c in ((False, True) if control else (False,))]


def _subsample(tokens: Tokens, limit: int | None, seed: int) -> Tokens:
    if limit is None or len(tokens) <= limit:
        return tokens
    keep = np.sort(np.random.default_rng(seed).choice(len(tokens), size=limit, replace=False))
    return replace(tokens, rows=tokens.rows[keep], labels=tokens.labels[keep], words=tokens.words[keep])


class _SetRun:
    """The data of one (label set, seed): train tokens (an N-shot sample, capped), every other split's
    tokens, and their control labels."""

    def __init__(self, entry, *, name: str, info: dict, shots: int | None, seed: int, config: ProbeConfig):
        self.name, self.kind, self.names = name, info["kind"], list(info["names"])
        self.seed, self.shots, self.config = seed, shots, config
        view, splits = label_view(entry, name), covered_splits(entry, name)
        if "train" not in splits:
            raise LayerfuseError(f"label set {name!r} of {entry.path} does not label the train split; it has {splits}")
        train = view.split("train")
        self.n_classes = len(self.names)
        sentences = sample_sentences(train.n_sentences, shots=shots, n_types=n_way(view), seed=seed)
        self.train = _subsample(scored_tokens(train, sentences=sentences), config.max_train_tokens, seed)
        if len(self.train) == 0:
            raise LayerfuseError(f"label set {name!r}: no scored train tokens to probe")
        self.evals = {s: scored_tokens(view.split(s)) for s in splits if s != "train"}
        if not self.evals:
            raise LayerfuseError(f"label set {name!r} of {entry.path} labels no split besides train to score on")
        self.control = ControlTask.from_train(self.train.labels, n_classes=self.n_classes, seed=seed)
        self.chunker = Chunker(self.names) if self.kind == SPAN else None

    def labels(self, tokens: Tokens, control: bool) -> np.ndarray:
        return self.control(tokens.words) if control else tokens.labels

    def scores(self, probe, xs: dict[str, torch.Tensor], *, control: bool, device) -> dict:
        out = {}
        for split, tokens in self.evals.items():
            pred = predict(probe, xs[split], device=device)
            gold = self.labels(tokens, control)
            # Span F1 of random per-type tags means nothing: control probes are scored by accuracy alone.
            out[split] = score(gold, pred, kind=self.kind if not control else TOKEN, counts=tokens.counts,
                               chunker=self.chunker)
        return out

    def fit(self, probe, x: torch.Tensor, *, control: bool, device):
        y = torch.from_numpy(self.labels(self.train, control))
        return train_probe(probe, x, y, config=self.config, seed=self.seed, device=device)

    def nu(self, x: np.ndarray) -> float | None:
        """The layer's variability nu on the train tokens (None where it is undefined or infinite)."""
        try:
            value = layer_variability(x, self.train.labels, max_per_class=self.config.max_per_class, seed=self.seed)
        except LayerfuseError:  # fewer than 2 classes in a tiny sample
            return None
        return value if np.isfinite(value) else None


def run_probes(entry, *, out: str, label_set_names: Sequence[str] | None = None, shots: int | None = None,
               seeds: Sequence[int] = (0,), control: bool = True, config: ProbeConfig | None = None,
               device: str | torch.device | None = None, progress: bool = False,
               on_record: Callable[[dict], None] | None = None) -> list[dict]:
    """Train and score every missing probe of the run into ``<out>/probe.jsonl``; returns the run's
    records (old and new) in the order of ``plan``. ``label_set_names``: default every set of the entry."""
    from tqdm.auto import tqdm

    from ..training.runtime import pick_device

    config = config or ProbeConfig()
    device = pick_device(None if device is None else str(device))
    sets = label_sets(entry)
    if isinstance(label_set_names, str):  # one set's name: not a sequence of its letters
        label_set_names = [label_set_names]
    names = list(sets) if label_set_names is None else list(label_set_names)
    for name in names:
        label_view(entry, name)  # an unknown name fails before any probe is trained
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise LayerfuseError("no seeds to run; give at least one")
    path = os.path.join(out, rec.FILENAME)
    info = cache_info(entry)
    jobs = plan(entry, control=control)
    base = {"command": "probe", "cache": info, "shots": shots, "config": config.record()}
    have: dict[tuple, list[dict]] = {}
    for r in rec.read_records(path):
        have.setdefault(rec.record_key(r), []).append(r)
    labels = {name: fingerprints_of(entry.meta, name) for name in names}

    def key(name, seed, job):
        return rec.record_key({**base, "label_set": name, "seed": seed, "probe": job.probe, "control": job.control})

    def found(name, seed, job) -> dict | None:
        """The record of this probe on the set's labels as they are (the latest; one from before records
        named the labels is taken as it is, as a sweep takes such runs)."""
        return next((r for r in reversed(have.get(key(name, seed, job), []))
                     if same_labels(r.get("labels_fingerprints"), labels[name])), None)

    missing = [(n, s, j) for n in names for s in seeds for j in jobs if found(n, s, j) is None]
    bar = tqdm(total=len(missing), disable=not progress, desc="probes", unit="probe")
    threads = torch.get_num_threads()
    if device.type == "cpu":
        # A probe's tensors ([batch, d] @ [d, C]) are too small for intra-op threads to pay; they wait on
        # each other, and when other work shares the cores a step takes 10-50x longer (measured here).
        torch.set_num_threads(1)
    try:
        for name in names:
            for seed in seeds:
                todo = [j for j in jobs if found(name, seed, j) is None]
                if not todo:
                    continue
                data = _SetRun(entry, name=name, info=sets[name], shots=shots, seed=seed, config=config)
                for record in _train_set(data, todo, entry=entry, base=base, device=device, bar=bar):
                    rec.append_record(path, record)
                    have.setdefault(rec.record_key(record), []).append(record)
                    if on_record:
                        on_record(record)
    finally:
        torch.set_num_threads(threads)
        bar.close()
    return [found(n, s, j) for n in names for s in seeds for j in jobs]


def _train_set(data: _SetRun, todo: list[Job], *, entry, base: dict, device, bar):
    """Records of the ``todo`` probes of one (label set, seed), one probe target (layer or mix) read at a time."""
    targets = list(dict.fromkeys(job.probe for job in todo))
    for target in targets:
        t_read = time.perf_counter()
        if target == MIX:
            layers = list(range(entry.num_layers + 1))
            x_np = data.train.layers(layers)
            xs = {s: torch.from_numpy(t.layers(layers)) for s, t in data.evals.items()}
        else:
            x_np = data.train.layer(target)
            xs = {s: torch.from_numpy(t.layer(target)) for s, t in data.evals.items()}
        x = torch.from_numpy(x_np)
        read_seconds = time.perf_counter() - t_read
        for job in (j for j in todo if j.probe == target):
            t0 = time.perf_counter()
            probe = (ScalarMixProbe if target == MIX else LinearProbe).for_data(x, data.n_classes)
            data.fit(probe, x, control=job.control, device=device)
            record = {
                **base, "label_set": data.name, "labels_fingerprints": fingerprints_of(entry.meta, data.name),
                "kind": data.kind, "probe": job.probe, "control": job.control,
                "seed": data.seed, "n_classes": data.n_classes, "n_train_tokens": len(data.train),
                "scores": data.scores(probe, xs, control=job.control, device=device),
            }
            if target == MIX:
                weights = probe.weights()
                gamma = float(probe.gamma.detach())
                record.update(mix_weights=weights, gamma=gamma if np.isfinite(gamma) else None,
                              center_of_gravity=center_of_gravity(weights))
            elif not job.control:
                record["nu"] = data.nu(x_np)
            record["seconds"] = {"read": round(read_seconds, 4), "train": round(time.perf_counter() - t0, 4)}
            record["versions"] = versions()
            bar.update(1)
            yield record
