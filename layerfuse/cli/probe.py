"""`layerfuse probe`: a linear probe on every cached layer and a ScalarMix probe over all of them,
for each label set of the entry, with control tasks; results in ``<out>/probe.jsonl`` (a rerun
resumes), a table per task printed and written to ``probe.md``, and a tasks x layers figure."""

from __future__ import annotations

import os

import click

from ..errors import OptionError
from ..probing.probe import ProbeConfig
from .errors import friendly_errors
from .options import (
    NAME_OR_PATH,
    cache_options,
    default_of,
    device_option,
    parse_list,
    parse_shots,
    quiet_option,
    resolve,
    say,
    seed_item,
)
from .progress import show_progress


def parse_seeds(seeds: str | None, trials: int | None) -> list[int]:
    """``--seeds 0,1,2`` or ``--trials K`` (seeds 0..K-1); neither: seed 0."""
    if seeds is not None and trials is not None:
        raise OptionError(f"--seeds {seeds} and --trials {trials} both name the seeds; give one")
    if trials is not None:
        return list(range(trials))
    values = parse_list(seeds if seeds is not None else "0", name="seeds", cast=seed_item)
    if len(set(values)) != len(values):
        raise OptionError(f"--seeds {seeds}: a seed is named twice")
    return values


def _title(entry) -> str:
    name = lambda text: os.path.basename(str(text).rstrip("/\\")) or str(text)  # noqa: E731
    return f"{name(entry.meta.get('model', '?'))} on {name(entry.meta.get('dataset', '?'))}"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@cache_options
@click.option("--labels", default=None, metavar="NAME[,NAME...]",
              help="Label sets to probe, comma-separated (pos,chunk,ner). Default: every set the entry has.")
@click.option("--shots", default="all", show_default=True,
              help="N: train each probe on N x C train sentences (C = entity types of a span set, classes of a "
                   "token set), sampled by the seed; or all.")
@click.option("--seeds", default=None, help="Seeds, comma-separated (sample, batch order, control task). Default: 0.")
@click.option("--trials", type=click.IntRange(min=1), default=None, help="Seeds 0..K-1 (instead of --seeds).")
@click.option("--control/--no-control", default=True, show_default=True,
              help="Also probe each layer on a control task (a random label per word type) for selectivity.")
@click.option("--epochs", type=click.IntRange(min=0), default=default_of(ProbeConfig, "epochs"), show_default=True,
              help="Passes over the train tokens.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=default_of(ProbeConfig, "lr"),
              show_default=True, help="Adam's learning rate (constant).")
@click.option("--min-steps", type=click.IntRange(min=0), default=default_of(ProbeConfig, "min_steps"),
              show_default=True, help="Updates at least, whatever --epochs gives (an N-shot sample is a few batches).")
@click.option("--batch-size", type=click.IntRange(min=1), default=default_of(ProbeConfig, "batch_size"),
              show_default=True, help="Tokens per update.")
@click.option("--max-train-tokens", type=click.IntRange(min=1), default=default_of(ProbeConfig, "max_train_tokens"),
              help="Train on a seeded random subsample of this many train tokens (bounds the ScalarMix probe's "
                   "memory: tokens x (L+1) x d float16). Default: all.")
@click.option("--out", type=NAME_OR_PATH, default=os.path.join("runs", "probe"), show_default=True,
              help="Folder for probe.jsonl, probe.md and probe.png; a rerun into it trains only what is missing.")
@device_option
@quiet_option
@friendly_errors
def main(cache, model, dataset, cache_dir, read, labels, shots, seeds, trials, control, epochs, lr, min_steps,
         batch_size, max_train_tokens, out, device, quiet):
    """Probe every cached layer with a linear classifier, per label set, with control tasks."""
    from ..probing.data import label_sets
    from ..probing.report import task_table, write_report
    from ..probing.run import run_probes

    shots = parse_shots(shots)
    seed_list = parse_seeds(seeds, trials)
    config = ProbeConfig(epochs=epochs, lr=lr, min_steps=min_steps, batch_size=batch_size,
                         max_train_tokens=max_train_tokens)
    entry = resolve(cache, model, dataset, cache_dir, read=read, quiet=quiet)
    sets = label_sets(entry)
    names = list(sets) if labels is None else parse_list(labels, name="labels", cast=str)
    unknown = [n for n in names if n not in sets]
    if unknown:
        raise OptionError(f"--labels {labels}: {', '.join(unknown)} not in {entry.path}; it has {', '.join(sets)}")
    with_control = ", with control tasks" if control else ""  # said with or without --quiet (bars only)
    say(f"probing {', '.join(names)} on {entry.path}: layers 0..{entry.num_layers} and a ScalarMix, "
        f"seeds {', '.join(map(str, seed_list))}, shots {shots or 'all'}{with_control}")
    records = run_probes(entry, out=out, label_set_names=names, shots=shots, seeds=seed_list, control=control,
                         config=config, device=device, progress=show_progress(quiet))
    title = f"{_title(entry)}, shots {shots or 'all'}"
    md, png, tasks = write_report(records, out=out, title=title)
    for task in tasks:
        click.echo(f"\n{task.name} ({task.kind})")
        for line in task_table(task):
            click.echo(line)
    click.echo(f"\nwrote {os.path.join(out, 'probe.jsonl')}, {md} and {png}")


if __name__ == "__main__":
    main()
