"""`layerfuse sweep`: the few-shot grid from one cache, resumable, then a table and the paper-style plots."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex

import click

from ..errors import LayerfuseError
from ..experiments.heads import KEEP_HEADS, SWEEP_KEEPS
from ..experiments.packs import CUDA_PACK_MAX
from ..fusions.registry import DEFAULT_SWEEP_FUSIONS, FUSIONS, fusions_that_pack
from ..tasks import task_of
from ..training.config import TrainConfig
from .errors import friendly_errors
from .options import (
    BATCH_SIZE_HELP,
    NAME_OR_PATH,
    apply_protocol,
    cache_options,
    default_of,
    device_option,
    extract_options,
    fusion_option_flags,
    fusion_settings,
    labels_option,
    layers_option,
    masking_options,
    parse_list,
    parse_shots,
    protocol_option,
    query_layer_option,
    quiet_option,
    resolve,
    say,
    task_option,
)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@task_option
@labels_option
@click.option("--fusions", default=",".join(DEFAULT_SWEEP_FUSIONS), show_default=True,
              help="Comma-separated fusions (train-head --help describes each).")
@click.option("--shots", default="8,16,32,64,128", show_default=True,
              help="Comma-separated N (N x C sentences; MLM: N blocks), or all.")
@click.option("--epochs", default="25,50,75,100", show_default=True, help="Comma-separated epoch caps.")
@click.option("--trials", type=click.IntRange(min=1), default=5, show_default=True, help="Seeds 0..trials-1.")
@click.option("--lrs", "--lr", "lrs", default="default", show_default=True,
              help="Comma-separated max learning rates, a grid dimension (the report picks the best on dev); "
                   "'default' = each fusion's FE default (as train-head).")
@fusion_option_flags(grid=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=default_of(TrainConfig, "batch_size"),
              show_default=True, help=BATCH_SIZE_HELP)
@layers_option(extra_help="Default: all.")
@query_layer_option
@click.option("--eval-points", type=click.IntRange(min=1), default=5, show_default=True,
              help="Evenly spaced dev evaluations per run (the last at the end).")
@click.option("--dev-sentences", type=click.IntRange(min=1), default=None,
              help="Evaluate on a fixed random subset of dev this size. Default: all of dev.")
@click.option("--precision", type=click.Choice(["auto", "fp32", "bf16"]), default="auto", show_default=True,
              help="Autocast of the heads' products; auto = bf16 where this machine multiplies it clearly "
                   "faster (measured once, remembered in the cache root), else fp32.")
@device_option
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes. Default: one per core this process may use (its CPU affinity and CPU quota).")
@click.option("--pack", type=click.IntRange(min=1), default=None,
              help="Train up to K runs that differ in seed, N, rate or epoch cap together, as one stacked head "
                   "(one step for all, each at its own rate and schedule; each dev batch read once for all); FE "
                   f"NER runs of {', '.join(fusions_that_pack())} pack; other fusions, MLM, FT, auto:K, "
                   "grad_accum > 1 and fp16 runs train alone. "
                   "1 = one run at a time. Default: 1 on a CPU; on CUDA as many as a quarter of the GPU's free "
                   f"memory holds, at most {CUDA_PACK_MAX}.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None,
              help="Run every run as a Ray task: --ray alone starts Ray here, --ray ADDRESS joins a cluster.")
@click.option("--out", type=NAME_OR_PATH, default=os.path.join("runs", "sweep"), show_default=True,
              help="Results folder.")
@click.option("--keep-heads", type=click.Choice(KEEP_HEADS), default=SWEEP_KEEPS, show_default=True,
              help="Heads to keep in OUT/heads, for `layerfuse export OUT --run RUN_ID` or `--best`: the best run "
                   "of each cell (a setting's trials) by dev score, every run's, or none.")
@cache_options
@masking_options
@click.option("--report", "report_only", is_flag=True, help="Only render the table and plots from the results file.")
@click.option("--curve-shots", default=None,
              help="N values (or all) for the plot of dev score against step (f1_vs_step.png). Default: smallest "
                   "and largest (all when no run has an N).")
@click.option("--per-lr", is_flag=True, help="Also print one table per learning rate.")
@protocol_option
@quiet_option
@friendly_errors
def main(task, labels, fusions, shots, epochs, trials, lrs, batch_size, layers, query_layer, eval_points,
         dev_sentences, precision, device, workers, pack, ray_address, out, keep_heads, cache, model, dataset,
         cache_dir, read, block_size, mask_seed, mlm_probability, report_only, curve_shots, per_lr, protocol, quiet,
         **fusion_flags):
    """Run fusion x N-shot x epoch cap x trial from one cache (skipping runs already done)."""
    from ..experiments.report import render
    from ..experiments.results import RESULTS, read_results
    from .progress import show_progress

    curve = parse_list(curve_shots, name="curve-shots", cast=_curve_shots,
                       what="a positive integer or 'all'") if curve_shots else None
    from .roots import checked_out

    out = checked_out(out)  # results, heads and the report go there: a file or read-only is one line before any run
    if report_only:
        _say_grid_ignored()
        records = list(read_results(os.path.join(out, RESULTS), skipped=say).values())
        if not records:
            raise LayerfuseError(f"no results in {os.path.join(out, RESULTS)}")
    else:
        from ..experiments.loaders import check_dev_subset, check_samples
        from ..experiments.runner import grid, run_sweep
        from ..training.runtime import resolve_precision
        from .roots import checked_root

        if cache_dir or not cache:  # as train-head: the root is read; written only to extract a missing entry
            checked_root(cache_dir, write=False)

        # Every list is checked before any work starts: a bad item is one line, not a traceback.
        lists = {"fusions": parse_list(fusions, name="fusions", cast=_one_of(FUSIONS),
                                       what=f"one of {', '.join(FUSIONS)}"),
                 "shots": parse_list(shots, name="shots", cast=parse_shots),
                 "epochs": parse_list(epochs, name="epochs")}
        axes = apply_protocol({"lr": parse_list(lrs, name="lrs", cast=_lr, what="a number or 'default'"),
                               **fusion_flags}, protocol, names={"lr": "lrs"})
        settings = fusion_settings(axes, grid=True)  # each fusion's setting: a grid dimension for its runs
        masking = extract_options(task, block_size=block_size, mask_seed=mask_seed, mlm_probability=mlm_probability)
        base = TrainConfig(fusion="base", shots=None, epochs=1, seed=0, batch_size=batch_size, task=task,
                           labels=labels, layers=layers, eval_points=eval_points,
                           dev_sentences=dev_sentences, query_layer=query_layer, device=device,
                           precision=resolve_precision(precision, device, root=cache_dir))
        configs = grid(**lists, trials=trials, base=base, lr=_listed(axes["lr"]),
                       **{name: _listed(values) for name, values in settings.items()})
        _check_curve_shots(curve, lists["shots"], out)
        _say_settings_unused(settings, lists["fusions"])
        entry = resolve(cache, model, dataset, cache_dir, read=read, extract=masking, quiet=quiet).with_labels(labels)
        check_samples(entry, configs)  # a sample larger than train: one line before anything else is said
        check_dev_subset(entry, configs)  # scripts' grids say "all of dev" themselves when their subset is larger
        _refuse_another_metric(out, entry, task)
        say(f"precision: {base.precision}")
        if pack is None:
            from ..experiments.packs import default_pack
            from ..training.runtime import pick_device

            pack = default_pack(entry, configs, pick_device(device))
        _say_alone(configs, pack)
        run_sweep(entry, configs, out=out, workers=workers, ray=ray_address, progress=show_progress(quiet), log=say,
                  pack=pack, keep_heads=keep_heads)
        records = list(read_results(os.path.join(out, RESULTS)).values())  # the report covers the whole --out
        _say_kept(out, task)
        if task_of(task).labels_from_data:  # nu needs classes; an MLM entry's labels are the vocabulary
            try:
                _save_layer_scores(entry, layers, out)
            except (LayerfuseError, OSError) as exc:  # the runs are done and recorded: the report still goes out
                with contextlib.suppress(FileNotFoundError):  # an earlier sweep's scores are not these runs'
                    os.remove(os.path.join(out, "layer_scores.json"))
                say(f"note: the layers' scores were not computed ({exc}); the report goes without them")
    paths = render(records, out, curve_shots=curve, per_lr=per_lr, nu=_layer_scores(out))
    with open(paths["table"], encoding="utf-8") as f:
        click.echo(f.read())
    click.echo("plots: " + ", ".join(p for k, p in paths.items() if k != "table"))


def _check_curve_shots(curve: list | None, shots: list, out: str) -> None:
    """--curve-shots names N this grid or the runs already in ``out`` have, before any run (it was checked
    by the report, after the whole grid had trained)."""
    from ..experiments.report import check_curve_shots
    from ..experiments.results import RESULTS, read_results

    if curve:
        recorded = {r["config"].get("shots") for r in read_results(os.path.join(out, RESULTS)).values()}
        check_curve_shots(curve, set(shots) | recorded, whose="the grid's and the runs'")


def _refuse_another_metric(out: str, entry, task: str) -> None:
    """Before any run, and before anything is said: this grid's metric must be that of the runs already in
    ``out`` (one report, one metric), on this entry and its labels as they are (`runner.refuse_other_entry`)."""
    from ..cache.label_sets import TOKEN
    from ..experiments.report import ACCURACY, METRICS
    from ..experiments.results import RESULTS, read_results, refuse_mixed_metrics
    from ..experiments.runner import refuse_other_entry

    metric = (ACCURACY if entry.meta.get("label_kind") == TOKEN else METRICS[task_of(task).headline]).name
    results = os.path.join(out, RESULTS)
    records = read_results(results).values()
    refuse_mixed_metrics(records, results, adding=(metric, entry.meta.get("label_set") or task))
    refuse_other_entry(results, records, entry)


def _say_kept(out: str, task: str) -> None:
    from ..experiments.heads import kept_heads

    kept = kept_heads(os.path.join(out, "heads"))
    if kept and task_of(task).labels_from_data:  # an MLM head exports as no token-classification model
        say(f"{len(kept)} head{'s' if len(kept) > 1 else ''} kept in {os.path.join(out, 'heads')}; "
            f"export the best: layerfuse export {shlex.quote(out)} --best --out models/NAME")  # pasted as is


def _save_layer_scores(entry, layers: str | None, out: str) -> None:
    """nu of the fused layers on the whole train split (as `layerfuse rank-layers` computes it, seconds), for
    the layers-used figure: do the heads use the layers the score calls well specialised?"""
    from ..layers import parse_layers
    from ..layers.scores import score_layers

    spec = parse_layers(layers, num_layers=entry.num_layers)
    scores = score_layers(entry.split("train"), layers=list(spec.candidates))
    from ..files import write_json  # whole or not at all: a kill while writing left a file every report failed on

    write_json(os.path.join(out, "layer_scores.json"),
               [[int(layer), nu if math.isfinite(nu) else None] for layer, nu in scores], indent=None)


def _layer_scores(out: str) -> list | None:
    """The scores `_save_layer_scores` wrote, or None (the figure then has no nu panel): none were written,
    or the file is not what it writes (cut short, edited), which is said in one line."""
    path = os.path.join(out, "layer_scores.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            scores = json.load(f)
        if all(isinstance(layer, int) and (nu is None or isinstance(nu, (int, float))) for layer, nu in scores):
            return scores
    except (OSError, ValueError, TypeError):
        pass
    say(f"note: {path} is not a list of [layer, score] pairs (cut short or edited): the layers-used figure is "
        "drawn without the scores; the next sweep into this folder writes it again")
    return None


def _one_of(choices):
    def check(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text
    return check


def _curve_shots(text: str) -> int | None:
    try:
        return parse_shots(text)
    except LayerfuseError:  # named as --curve-shots by parse_list, not as --shots
        raise ValueError(text) from None


def _lr(text: str) -> float | None:
    return None if text == "default" else float(text)


def _listed(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


# The grid's own options: what --report, which renders the results file as it is, does not read.
GRID_OPTIONS = ("fusions", "shots", "epochs", "trials", "lrs", "layers", "dev_sentences", "precision", "pack")


def _say_grid_ignored() -> None:
    """--report with grid options: one line saying it renders every run of the results file instead."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    given = [f"--{name.replace('_', '-')}" for name in GRID_OPTIONS
             if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]
    if given:
        say(f"note: --report renders every run of the results file; {', '.join(given)} ignored")


def _say_settings_unused(settings: dict, fusions: list[str]) -> None:
    """A fusion's setting given for a sweep without that fusion: one line, not silence."""
    from ..fusions.registry import declared_options, owned_options

    declared, owners = declared_options(), owned_options()
    for name, values in settings.items():
        given = [v for v in _listed(values) if v not in (None, declared[name].default)]
        if given and not owners[name] & set(fusions):
            say(f"note: {name} is a setting of {', '.join(sorted(owners[name]))}, which --fusions leaves out: ignored")


def _say_alone(configs: list, pack: int) -> None:
    """With --pack K, the runs that cannot pack (auto:K, FT, ...) train alone: said once, with how many."""
    from ..training.packed import can_pack

    alone = sum(not can_pack(c) for c in configs)
    if pack > 1 and alone:
        say(f"note: {alone} of {len(configs)} runs cannot pack (--pack's help says which) and train alone")


if __name__ == "__main__":
    main()
