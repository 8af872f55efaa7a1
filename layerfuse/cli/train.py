"""`train-head`: train one fusion head straight from the cache (FE mode) or end to end (FT) and
save its result and checkpoint; `--dry-run` prints every fusion's parameter budget (paper Table 2)."""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import fields

import click

from ..display import f1_points
from ..errors import LayerfuseError, OptionError
from ..fusions.registry import DEFAULT_FUSION, FUSIONS
from ..layers.spec import layers_named, xie_shortfall
from ..tasks import task_of
from ..training.config import FE_LR, FE_LR_BY_FUSION, PAPER_LR, PRECISIONS, TrainConfig, diverged_at
from ..training.diagnostics import describe
from ..training.runtime import pick_device, resolve_precision
from .errors import friendly_errors
from .options import (
    BATCH_SIZE_HELP,
    FUSION_HELP,
    NAME_OR_PATH,
    SEED,
    apply_protocol,
    cache_options,
    check_one_source,
    default_of,
    device_option,
    extract_options,
    fusion_option_flags,
    fusion_settings,
    labels_option,
    layers_option,
    masking_options,
    parse_shots,
    protocol_option,
    query_layer_option,
    quiet_option,
    resolve,
    say,
    task_option,
)
from .roots import checked_out, checked_root


def run_name(config: TrainConfig) -> str:
    """``<fusion>[-ft][-mlm][-<label set>]-n<shots>-e<epochs>-s<seed>``, plus ``-l<layers>`` when --layers is
    given; a head trained with ``--labels NAME`` is named after its set, so heads of one cache's sets never
    overwrite each other."""
    tags = ("-ft" if config.mode == "ft" else "") + ("" if task_of(config).is_default else f"-{config.task}")
    tags += f"-{config.labels}" if config.labels else ""
    name = f"{config.fusion}{tags}-n{config.shots or 'all'}-e{config.epochs}-s{config.seed}"
    if config.layers:
        name += "-l" + layers_named(config.layers)
    return name


def budget_table(entry, *, layers: str | None, options: dict, current: str | None = None) -> str:
    """Trainable parameters (fusion + classifier, or + LM head for MLM) of every fusion on this
    cache's backbone, each with its own settings from ``options`` (`TrainConfig.head_options`)."""
    from ..fusions import masked_lm_budget, parameter_budget
    from ..layers import parse_layers

    meta = entry.meta
    spec = parse_layers(layers, num_layers=entry.num_layers)
    shape = dict(n_layers=spec.n_fused, dim=entry.dim, num_heads=int(meta["num_heads"]), ffn_dim=int(meta["ffn_dim"]),
                 **options)
    if task_of(meta).masks_inputs:  # the tied decoder is the backbone's embeddings: not counted
        budget = masked_lm_budget(**shape, vocab_size=int(meta["vocab_size"]))
        outputs = f"an LM head over {int(meta['vocab_size']):,} tokens (decoder tied to the embeddings)"
    else:
        budget = parameter_budget(**shape, n_labels=len(entry.label_names))
        outputs = f"{len(entry.label_names)} labels"
    lines = [
        f"{meta.get('model')}: L={entry.num_layers}, d={entry.dim}, {meta['num_heads']} heads, "
        f"ffn {meta['ffn_dim']}; fusing {spec.n_fused} layers ({spec.describe(entry.num_layers)}); "
        f"{outputs}" + "".join(f"; {name.replace('_', ' ')} {value}" for name, value in options.items()),
        f"  {'fusion':<10} {'trainable params':>16}",
    ]
    for fusion, n in budget.items():
        mark = "  <- --fusion" if fusion == current else ""  # the head this command would train
        lines.append(f"  {fusion:<10} {n:>16,}  ({n / 1e6:.2f}M){mark}")
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--fusion", type=click.Choice(list(FUSIONS)), default=DEFAULT_FUSION, show_default=True, help=FUSION_HELP)
@task_option
@labels_option
@click.option("--shots", default="all", show_default=True,
              help="N: train on N x C sentences (C = the label set's entity types, or its word classes for a token "
                   "set such as POS; MLM: N blocks) sampled by --seed; or all.")
@click.option("--epochs", type=click.IntRange(min=0), default=10, show_default=True, help="Epoch cap.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Fixes the sample, the init and the batch order.")
@click.option("--lr", type=float, default=None,
              help=f"Max learning rate (linear decay to 0). Default: FE {FE_LR:g} "
                   f"({', '.join(f'{k} {v:g}' for k, v in FE_LR_BY_FUSION.items())}), FT {PAPER_LR:g} (the paper's).")
@click.option("--batch-size", type=click.IntRange(min=1), default=default_of(TrainConfig, "batch_size"),
              show_default=True, help=BATCH_SIZE_HELP)
@click.option("--eval-every", type=click.IntRange(min=1), default=None,
              help="Evaluate every this many steps. Default: once per epoch.")
@click.option("--eval-points", type=click.IntRange(min=1), default=None,
              help="Evaluate at this many evenly spaced points instead.")
@click.option("--dev-sentences", type=click.IntRange(min=1), default=None,
              help="Evaluate on a fixed random subset of dev this size. Default: all of dev.")
@layers_option(extra_help="Default: all.")
@click.option("--dropout", type=click.FloatRange(0, 1, max_open=True), default=default_of(TrainConfig, "dropout"),
              show_default=True, help="Dropout in the extra layers and before the classifier.")
@click.option("--weight-decay", type=click.FloatRange(min=0), default=default_of(TrainConfig, "weight_decay"),
              show_default=True, help="AdamW's weight decay (none on biases and norms).")
@click.option("--warmup", type=click.IntRange(min=0), default=default_of(TrainConfig, "warmup"), show_default=True,
              help="Warmup steps.")
@device_option
@click.option("--max-grad-norm", type=click.FloatRange(min=0), default=default_of(TrainConfig, "max_grad_norm"),
              show_default=True, help="0 = no clipping.")
@click.option("--mode", type=click.Choice(["fe", "ft"]), default=default_of(TrainConfig, "mode"), show_default=True,
              help="fe: train on the cache; ft: fine-tune the backbone end to end with the head.")
@click.option("--freeze", default=None,
              help="FT: freeze 'embeddings', or the embeddings and the bottom K layers (K >= 1; 0: nothing frozen, "
                   "the default).")
@click.option("--grad-accum", type=click.IntRange(min=1), default=default_of(TrainConfig, "grad_accum"),
              show_default=True, help="Micro-batches per optimizer step.")
@click.option("--precision", type=click.Choice(["auto", *PRECISIONS]), default="auto", show_default=True,
              help="Autocast for forward passes; auto = bf16 where this machine multiplies it clearly faster "
                   "(measured once, remembered in the cache root), else fp32 (fp16 needs CUDA).")
@fusion_option_flags()
@query_layer_option
@protocol_option
@cache_options
@masking_options
@click.option("--out", type=NAME_OR_PATH, default="runs", show_default=True,
              help="Folder for the result JSON and the checkpoint.")
@click.option("--dry-run", is_flag=True, help="Print every fusion's parameter budget and exit.")
@click.option("--verbose", is_flag=True, help="Print each evaluation.")
@quiet_option
@friendly_errors(interrupted="interrupted; no head was saved (a head is written only once trained): rerun "
                             "the same command to train it from the start (what it had extracted is kept)")
def main(cache, model, dataset, cache_dir, read, out, dry_run, verbose, quiet, protocol, block_size, mask_seed,
         mlm_probability, **options):
    """Train a fusion head on cached hidden states and report its best dev score: span F1, or accuracy for a
    label set of word classes (POS); MLM: perplexity."""
    if cache_dir or not cache:  # the root is read; written only to extract a missing entry (`extract` checks then)
        checked_root(cache_dir, write=False)
    if not dry_run:
        out = checked_out(out)  # a file, or read-only: one line now, not after the training
    options = apply_protocol({**options, "shots": parse_shots(options["shots"])}, protocol)
    # nothing trains on a dry run: no speed check measured and written into the root
    options["precision"] = "fp32" if dry_run else resolve_precision(options["precision"], options["device"],
                                                                    root=cache_dir)
    device = pick_device(options["device"]).type
    if options["precision"] == "fp16" and device != "cuda":
        raise OptionError(f"--precision fp16 needs CUDA (its loss scaling is a GPU's); on {device} use bf16 or fp32")
    settings = fusion_settings(options)  # the fusions' own settings, by name
    config = TrainConfig(**{f.name: options[f.name] for f in fields(TrainConfig) if f.name != "options"},
                         options=settings)  # the other options = the fields, one to one
    _say_ignored(config, asked_top=options["query_layer"] == "top")
    masking = extract_options(config.task, block_size=block_size, mask_seed=mask_seed, mlm_probability=mlm_probability)
    if dry_run:  # the budgets need the backbone's shape and the labels: no extraction of a missing entry
        from ..experiments.find import planned_entry

        check_one_source(cache, model, dataset)
        entry = planned_entry(cache=cache, model=model, dataset=dataset, cache_dir=cache_dir,
                              options={**masking, **(read or {})}, labels=config.labels, log=say)
    else:
        entry = resolve(cache, model, dataset, cache_dir, read=read, extract=masking,
                        quiet=quiet).with_labels(config.labels)
    from ..experiments.runner import defaults_named_once

    (config,) = defaults_named_once(entry, [config])  # `--layers 1..L`, `--extra-layers 1` on 6 layers: the default run
    if dry_run:
        click.echo(budget_table(entry, layers=config.layers, options=config.head_options(entry.num_layers),
                                current=config.fusion))
        return
    from ..experiments.loaders import check_dev_entities, check_dev_subset, check_samples, check_warmups

    check_samples(entry, [config])  # a sample or a dev subset the entry cannot give: one line before anything
    check_dev_subset(entry, [config])
    check_dev_entities(entry, [config])
    check_warmups(entry, [config])
    _refuse_another_run(os.path.join(out, run_name(config)) + ".json", config, entry)
    t0 = time.perf_counter()
    data = _load(entry, config)
    load_seconds = time.perf_counter() - t0
    say(f"precision: {config.precision}")  # auto's choice, as sweep says it: predict and export run fp32
    from ..training.loop import train_head
    from .progress import TrainBar, show_progress

    bar = TrainBar(run_name(config)) if show_progress(quiet) else None
    try:
        result = train_head(config, data, log=(bar.write if bar else say) if verbose else None, progress=bar)
    finally:
        if bar:
            bar.close()
    _refuse_diverged(result, config)
    stem = _save_somewhere(result, data, entry, config, out=out, load_seconds=load_seconds)
    click.echo(f"{config.fusion} shots={config.shots or 'all'} epochs={config.epochs} seed={config.seed}: "
               f"{_scores(result)}, {_params(result)}, {result.seconds['total']:.1f} s -> {stem}.json")
    z_layer = entry.num_layers if config.query_layers(entry.num_layers) else max(result.layers)
    click.echo(describe(result.layer_usage, z_layer=z_layer))
    short = xie_shortfall(config.layers, result.layers, num_layers=entry.num_layers)
    if short:
        click.echo(short)


def _refuse_diverged(result, config: TrainConfig) -> None:
    """A training whose loss went nan or inf (or whose head did) diverged: one line and exit 1, not a saved
    head that `predict` may refuse and a record whose F1 of a broken head reads like a result."""
    from ..training.checkpoint import non_finite_weights

    lost = diverged_at(result.evals)
    if lost is None and not non_finite_weights(result.tagger):
        return
    if lost is None:
        where = "nan or inf weights"
    elif math.isfinite(lost["train_loss"] or 0.0):
        where = f"dev loss {lost['dev_loss']} at step {lost['step']}"
    else:
        where = f"training loss {lost['train_loss']} by step {lost['step']}"
    raise LayerfuseError(f"training diverged ({where}); no head was saved: try a lower --lr than {config.max_lr:g}")


def _scores(result) -> str:
    """The run's headline: best dev F1 and test F1 there, in points (NER), or dev and test perplexity (MLM)."""
    if getattr(result, "best_dev_accuracy", None) is not None:  # a token-level label set (POS)
        return (f"best dev accuracy {f1_points(result.best_dev_accuracy)} (step {result.best_step}), "
                f"test accuracy {f1_points(result.test_accuracy_at_best)}")
    if result.best_dev_ppl is not None:
        test = "-" if result.test_ppl_at_best is None else f"{result.test_ppl_at_best:.2f}"
        return f"best dev perplexity {result.best_dev_ppl:.2f} (step {result.best_step}), test perplexity {test}"
    return (f"best dev F1 {f1_points(result.best_dev_f1)} (step {result.best_step}), "
            f"test F1 {f1_points(result.test_f1_at_best)}")


def _load(entry, config: TrainConfig):
    """FE: exactly the run's sample and layers from the cache; FT: the live backbone."""
    if config.mode == "ft":
        import torch

        from ..experiments.loaders import load_live

        data = load_live(entry, [config])
        torch.manual_seed(config.seed)
        return data
    from ..training.data import load_for_run

    return load_for_run(entry, layers=config.layers, shots=config.shots, seed=config.seed,
                        query_layers=config.query_layers(entry.num_layers))


def _say_ignored(config: TrainConfig, *, asked_top: bool) -> None:
    """One line naming what the run's fusion has no use for (another fusion's setting, a z_L it does not
    read), so that nothing given is dropped without a word; its record holds what ran."""
    from ..fusions.registry import owned_options

    owners = owned_options()
    ignored = [name for name, _ in config.options if config.fusion not in owners[name]]
    ignored += ["query_layer top"] if asked_top and config.query_layer != "top" else []
    if ignored:
        say(f"note: {config.fusion} has no use for {', '.join(ignored)}: ignored")


def _refuse_another_run(path: str, config: TrainConfig, entry) -> None:
    """A record at ``path`` of another run (other settings, or another cache) is refused before any
    training: the file name holds fusion, N, epochs and seed alone, so saving would replace that run's
    record and head. The same run again (a rerun) replaces its own."""
    from ..experiments.results import run_id

    try:
        with open(path, encoding="utf-8") as f:
            before = json.load(f)
        old = before["config"]
        same = run_id(old) == run_id(config) and before.get("cache_key") == entry.meta.get("key")
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError):
        same = False  # not a record we can read: still not ours to replace
        old = {}
    if not same:
        mine = config.record()
        differ = [f"{name} {old.get(name)!r} there, {mine.get(name)!r} here" for name in sorted(set(mine) | set(old))
                  if name != "device" and old.get(name, mine.get(name)) != mine.get(name)]
        what = ("; ".join(differ[:3]) or "another cache entry") if old else "not a run record"
        theirs = old.get("layers") if old else None
        if theirs and config.layers and layers_named(theirs) != layers_named(config.layers):
            what += (f"; named by an earlier release, which wrote --layers {theirs} as this name, now "
                     f"-l{layers_named(theirs)}")  # a range was '.', as a list is: see `layers_named`
        raise LayerfuseError(f"{path} holds another run ({what}): saving this one would replace it; "
                             "pass another --out, or move that run first")


def _save_somewhere(result, data, entry, config: TrainConfig, *, out: str, load_seconds: float) -> str:
    """`_save` to ``out``, one train-head at a time, checking again that no other run was saved under this
    run's file name while it trained; when that fails late (another run there, the disk filled, the folder
    made read-only) the trained head is not lost: it is saved to a new folder of the system's temporary
    folder, and the one line names both."""
    from ..files import folder_locked

    stem = os.path.join(out, run_name(config))
    ours = [stem + end for end in (".head.safetensors", ".head.json", ".json", ".backbone")]
    try:
        with folder_locked(out):  # two train-heads saving into one --out: one at a time, each checking again
            before = {path for path in ours if os.path.lexists(path)}  # under the lock: another run's files too
            try:
                _refuse_another_run(stem + ".json", config, entry)  # saved meanwhile?
                return _save(result, data, entry, config, out=out, load_seconds=load_seconds)
            except Exception:  # not the exit an interrupt held until the save was whole makes: that one is kept
                _remove_made(set(ours) - before)  # still under the lock: no other run's files, saved since
                raise
    except Exception as exc:  # noqa: BLE001 - OSError, or safetensors' own error type for the same faults
        reason = getattr(exc, "strerror", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
        if getattr(exc, "filename", None):
            reason += f": {exc.filename}"
        elsewhere = None
        try:
            elsewhere = tempfile.mkdtemp(prefix=f"layerfuse-{run_name(config)}-")
            saved = _save(result, data, entry, config, out=elsewhere, load_seconds=load_seconds)
        except Exception:  # noqa: BLE001 - nowhere to put it: say where it failed
            if elsewhere:
                shutil.rmtree(elsewhere, ignore_errors=True)
            raise LayerfuseError(f"could not write the head to --out {out} ({reason}); nothing was saved") from None
        raise LayerfuseError(f"could not write the head to --out {out} ({reason}); it is saved in {elsewhere} "
                             f"instead ({os.path.basename(saved)}.json and its head): move it where you want "
                             "it") from None


def _remove_made(paths) -> None:
    """What a failed save made in --out: a head without its record held the space a full disk needed, and
    loaded as if it were a run's."""
    for path in paths:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.remove(path)


def _save(result, data, entry, config: TrainConfig, *, out: str, load_seconds: float) -> str:
    """The head's checkpoint (and an FT backbone beside it) and the run's JSON record, written together: a
    Ctrl-C meanwhile waits for the last of them (`uninterrupted`), so a rerun of a run never leaves the
    earlier head with the new record, or the reverse; returns the stem."""
    import signal
    import sys

    from ..files import uninterrupted

    with uninterrupted(deliver=False) as held:
        stem = _write_run(result, data, entry, config, out=out, load_seconds=load_seconds)
    if held:  # the run is trained and saved: the interrupt ends the command, saying so
        say(f"interrupted after the head was saved: {stem}.json")
        sys.exit(130 if held[0] == signal.SIGINT else 143)
    return stem


def _write_run(result, data, entry, config: TrainConfig, *, out: str, load_seconds: float) -> str:
    from ..extract.models import quiet_transformers
    from ..files import write_json
    from ..training.checkpoint import file_sha256, same_mode, save_checkpoint, weights_sha256

    stem = os.path.join(out, run_name(config))
    task = task_of(config)
    best = f"best_dev_{task.headline}"  # best_dev_f1 or best_dev_ppl
    if result.best_dev_accuracy is not None:  # a token-level label set (POS)
        best = "best_dev_accuracy"
    extra = {best: getattr(result, best), "best_step": result.best_step}
    if not task.is_default:  # NER checkpoints name no task, as before tasks existed
        extra = {"task": task.name, **extra}
    if config.mode == "ft":  # the fine-tuned backbone goes beside the head; predict loads it
        backbone_dir = stem + ".backbone"
        # written whole into a hidden folder, then moved in place: a kill while saving leaves no half folder
        work = tempfile.mkdtemp(prefix=".backbone-", dir=out)
        try:
            with quiet_transformers():
                data.backbone.model.save_pretrained(work)
            data.backbone.tokenizer.save_pretrained(work)
            for name in os.listdir(work):  # safetensors writes 0600: as readable as the head (the umask)
                same_mode(os.path.join(work, name), like=os.path.join(work, "config.json"))
            os.chmod(work, os.stat(out).st_mode & 0o7777)  # mkdtemp makes it 0700: as open as --out
            shutil.rmtree(backbone_dir, ignore_errors=True)
            os.replace(work, backbone_dir)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        extra["backbone_path"] = os.path.basename(backbone_dir)
        extra["backbone_sha256"] = weights_sha256(backbone_dir)  # predict and export check the folder is this one
    weights, _ = save_checkpoint(stem + ".head", result.tagger, tagger_kwargs=result.tagger_kwargs,
                                 layers=result.layers, label_names=data.label_names, cache_meta=data.meta,
                                 cache_path=entry.path, config=config.record(), extra=extra)
    record = result.to_dict()
    record["seconds"]["load"] = load_seconds
    # Named beside the record, with the hash of its weights: a copied run folder still names its own head, and
    # export refuses a head that is not the one this run trained.
    record["checkpoint"] = os.path.basename(weights)
    record["head_sha256"] = file_sha256(weights)
    write_json(stem + ".json", record)
    return stem


def _params(result) -> str:
    """The head's trainable parameters, and in FT the backbone's trained with it."""
    backbone = f" + {result.backbone_params:,} of the backbone" if result.backbone_params else ""
    return f"{result.params:,} params{backbone}"


if __name__ == "__main__":
    main()
