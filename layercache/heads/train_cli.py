"""`train-head`: train one fusion head straight from the cache (FE mode) and save its result and
checkpoint; `--dry-run` prints every fusion's parameter budget (paper Table 2) instead."""

from __future__ import annotations

import json
import os
import re
import time

import click

from ..cli_util import friendly_errors
from ..errors import LayercacheError
from . import FUSIONS
from .data import parse_layer_spec
from .find import resolve_entry
from .train import TrainConfig, default_extra_layers


def parse_shots(value: str | int | None) -> int | None:
    """``N`` (sentences = N x entity types) or ``all``."""
    if value is None or str(value).strip().lower() == "all":
        return None
    try:
        shots = int(value)
    except ValueError:
        raise LayercacheError(f"--shots {value!r} is not a positive integer or 'all'") from None
    if shots < 1:
        raise LayercacheError(f"--shots {value!r} must be >= 1 (or 'all')")
    return shots


def run_name(config: TrainConfig) -> str:
    """``<fusion>-n<shots>-e<epochs>-s<seed>``, plus ``-l<layers>`` when --layers is given."""
    name = f"{config.fusion}{'-ft' if config.mode == 'ft' else ''}-n{config.shots or 'all'}-e{config.epochs}-s{config.seed}"
    if config.layers:
        name += "-l" + re.sub(r"[^0-9a-zA-Z]+", ".", config.layers).strip(".")
    return name


def budget_table(entry, *, layers: str | None, extra_layers: int | None, current: str | None = None) -> str:
    """Trainable parameters (fusion + classifier) of every fusion on this cache's backbone."""
    from .tagger import parameter_budget

    meta = entry.meta
    spec = parse_layer_spec(layers, num_layers=entry.num_layers)
    n_fused = spec.k or len(spec.candidates)
    extra = extra_layers or default_extra_layers(entry.num_layers)
    budget = parameter_budget(n_layers=n_fused, dim=entry.dim, num_heads=int(meta["num_heads"]),
                              ffn_dim=int(meta["ffn_dim"]), n_labels=len(entry.label_names), extra_layers=extra)
    fused = f"auto:{spec.k} of 1..{entry.num_layers}" if spec.k else ",".join(map(str, spec.candidates))
    lines = [
        f"{meta.get('model')}: L={entry.num_layers}, d={entry.dim}, {meta['num_heads']} heads, "
        f"ffn {meta['ffn_dim']}; fusing {n_fused} layers ({fused}); {len(entry.label_names)} labels; "
        f"extra = {extra} layer{'s' if extra > 1 else ''}",
        f"  {'fusion':<10} {'trainable params':>16}",
    ]
    for fusion, n in budget.items():
        mark = "  <-" if fusion == current else ""
        lines.append(f"  {fusion:<10} {n:>16,}  ({n / 1e6:.2f}M){mark}")
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--fusion", type=click.Choice(list(FUSIONS)), default="dwatt", show_default=True)
@click.option("--shots", default="all", show_default=True,
              help="N: train on N x C sentences (C = entity types) sampled by --seed; or all.")
@click.option("--epochs", type=click.IntRange(min=0), default=10, show_default=True, help="Epoch cap.")
@click.option("--seed", type=int, default=0, show_default=True, help="Fixes the sample, the init and the batch order.")
@click.option("--lr", type=float, default=5e-5, show_default=True, help="Max learning rate (linear decay to 0).")
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--eval-every", type=click.IntRange(min=1), default=None, help="Evaluate every this many steps. Default: once per epoch.")
@click.option("--eval-points", type=click.IntRange(min=1), default=None, help="Evaluate at this many evenly spaced points instead.")
@click.option("--dev-sentences", type=click.IntRange(min=1), default=None, help="Evaluate on a fixed random subset of dev this size. Default: all of dev.")
@click.option("--layers", default=None, help="Layers to fuse: 4,8,12 or 1..6 (0 = embeddings) or auto:K. Default: 1..L.")
@click.option("--extra-layers", type=click.IntRange(min=1), default=None, help="Layers of the extra head. Default: 1 if L <= 12 else 2.")
@click.option("--dropout", type=click.FloatRange(0, 1, max_open=True), default=0.1, show_default=True)
@click.option("--weight-decay", type=click.FloatRange(min=0), default=0.01, show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=0, show_default=True, help="Warmup steps.")
@click.option("--device", default=None, help="torch device. Default: cuda when present, else cpu.")
@click.option("--max-grad-norm", type=click.FloatRange(min=0), default=1.0, show_default=True, help="0 = no clipping.")
@click.option("--mode", type=click.Choice(["fe", "ft"]), default="fe", show_default=True,
              help="fe: train on the cache; ft: fine-tune the backbone end to end with the head.")
@click.option("--freeze", default=None, help="FT: freeze 'embeddings', or the embeddings and the bottom K layers.")
@click.option("--grad-accum", type=click.IntRange(min=1), default=1, show_default=True, help="Micro-batches per optimizer step.")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True,
              help="Autocast for forward passes (fp16 needs CUDA).")
@click.option("--cache", default=None, help="Path of a cache entry. Default: the entry for --model/--dataset, else the newest complete one.")
@click.option("--model", default=None, help="Backbone whose cache to use (extracted first when missing).")
@click.option("--dataset", default=None, help="Dataset whose cache to use (as for `extract`).")
@click.option("--cache-dir", default=None, help="Cache root. Default: $LAYERCACHE_HOME or ~/.cache/layercache.")
@click.option("--out", default="runs", show_default=True, help="Folder for the result JSON and the checkpoint.")
@click.option("--dry-run", is_flag=True, help="Print every fusion's parameter budget and exit.")
@click.option("--verbose", is_flag=True, help="Print each evaluation.")
@friendly_errors
def main(fusion, shots, epochs, seed, lr, batch_size, eval_every, eval_points, dev_sentences, layers, extra_layers, dropout, weight_decay,
         warmup, device, max_grad_norm, mode, freeze, grad_accum, precision, cache, model, dataset, cache_dir, out, dry_run, verbose):
    """Train a fusion head on cached hidden states and report its best dev F1."""
    config = TrainConfig(fusion=fusion, shots=parse_shots(shots), epochs=epochs, seed=seed, lr=lr,
                         batch_size=batch_size, eval_every=eval_every, eval_points=eval_points,
                         dev_sentences=dev_sentences, layers=layers, extra_layers=extra_layers,
                         dropout=dropout, weight_decay=weight_decay, warmup=warmup, device=device,
                         max_grad_norm=max_grad_norm, mode=mode, freeze=freeze, grad_accum=grad_accum,
                         precision=precision)
    say = lambda m: click.echo(m, err=True)  # noqa: E731
    entry = resolve_entry(cache=cache, model=model, dataset=dataset, cache_dir=cache_dir, log=say)
    if dry_run:
        click.echo(budget_table(entry, layers=layers, extra_layers=extra_layers, current=fusion))
        return

    from .checkpoint import save_checkpoint
    from .data import load_for_run
    from .train import train_head

    t0 = time.perf_counter()
    if config.mode == "ft":
        import torch

        from .ft import live_data
        from .live import load_live_backbone
        from .train import pick_device

        spec = parse_layer_spec(config.layers, num_layers=entry.num_layers)
        backbone = load_live_backbone(entry.meta, device=pick_device(config.device))
        data = live_data(entry, backbone, layers=spec.candidates)
        torch.manual_seed(config.seed)
    else:
        data = load_for_run(entry, layers=config.layers, shots=config.shots, seed=config.seed)
    load_seconds = time.perf_counter() - t0
    result = train_head(config, data, log=say if verbose else None)

    stem = os.path.join(out, run_name(config))
    extra = {"best_dev_f1": result.best_dev_f1, "best_step": result.best_step}
    if config.mode == "ft":  # the fine-tuned backbone goes beside the head; predict loads it
        backbone_dir = stem + ".backbone"
        data.backbone.model.save_pretrained(backbone_dir)
        data.backbone.tokenizer.save_pretrained(backbone_dir)
        extra["backbone_path"] = os.path.basename(backbone_dir)
    weights, _ = save_checkpoint(stem + ".head", result.tagger, tagger_kwargs=result.tagger_kwargs,
                                 layers=result.layers, label_names=data.label_names, cache_meta=data.meta,
                                 cache_path=entry.path, config=config, extra=extra)
    record = result.to_dict()
    record["seconds"]["load"] = load_seconds
    record["checkpoint"] = weights
    with open(stem + ".json", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
    test = "-" if result.test_f1_at_best is None else f"{result.test_f1_at_best:.4f}"
    click.echo(f"{config.fusion} shots={config.shots or 'all'} epochs={config.epochs} seed={config.seed}: "
               f"best dev F1 {result.best_dev_f1:.4f} (step {result.best_step}), test F1 {test}, "
               f"{result.params:,} params, {result.seconds['total']:.1f} s -> {stem}.json")


if __name__ == "__main__":
    main()
