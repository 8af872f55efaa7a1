"""`sweep`: the few-shot grid from one cache, resumable, then a table and the paper-style plots."""

from __future__ import annotations

import os

import click

from ..errors import LayercacheError
from ..training.config import PAPER_LR
from .errors import friendly_errors
from .options import cache_options, layers_option, parse_list, resolve, say


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--fusions", default="dwatt,concat,extra", show_default=True, help="Comma-separated fusions.")
@click.option("--shots", default="8,16,32,64,128", show_default=True, help="Comma-separated N (N x C sentences).")
@click.option("--epochs", default="25,50,75,100", show_default=True, help="Comma-separated epoch caps.")
@click.option("--trials", type=click.IntRange(min=1), default=5, show_default=True, help="Seeds 0..trials-1.")
@click.option("--lr", type=float, default=PAPER_LR, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=16, show_default=True)
@layers_option(extra_help="Default: all.")
@click.option("--extra-layers", type=click.IntRange(min=1), default=None)
@click.option("--eval-points", type=click.IntRange(min=1), default=5, show_default=True,
              help="Evenly spaced dev evaluations per run (the last at the end).")
@click.option("--dev-sentences", type=click.IntRange(min=1), default=None,
              help="Evaluate on a fixed random subset of dev this size. Default: all of dev.")
@click.option("--precision", type=click.Choice(["auto", "fp32", "bf16"]), default="auto", show_default=True,
              help="Autocast of the heads' products; auto = bf16 where the hardware multiplies it natively "
                   "(CPUs with AMX, recent GPUs), else fp32.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Processes. Default: one per core.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None,
              help="Run every run as a Ray task: --ray alone starts Ray here, --ray ADDRESS joins a cluster.")
@click.option("--out", default=os.path.join("runs", "sweep"), show_default=True, help="Results folder.")
@cache_options
@click.option("--report", "report_only", is_flag=True, help="Only render the table and plots from the results file.")
@click.option("--curve-shots", default=None, help="N values for the F1-vs-step plot. Default: smallest and largest.")
@friendly_errors
def main(fusions, shots, epochs, trials, lr, batch_size, layers, extra_layers, eval_points, dev_sentences, precision, workers,
         ray_address, out, cache, model, dataset, cache_dir, report_only, curve_shots):
    """Run fusion x N-shot x epoch cap x trial from one cache (skipping runs already done)."""
    from ..experiments.report import render
    from ..experiments.results import RESULTS, read_results

    curve = parse_list(curve_shots, name="curve-shots") if curve_shots else None
    if report_only:
        records = list(read_results(os.path.join(out, RESULTS)).values())
        if not records:
            raise LayercacheError(f"no results in {os.path.join(out, RESULTS)}")
    else:
        from ..experiments.runner import grid, run_sweep
        from ..training.config import TrainConfig
        from ..training.runtime import resolve_precision

        base = TrainConfig(fusion="base", shots=None, epochs=1, seed=0, lr=lr, batch_size=batch_size,
                           layers=layers, extra_layers=extra_layers, eval_points=eval_points,
                           dev_sentences=dev_sentences, precision=resolve_precision(precision))
        say(f"precision: {base.precision}")
        configs = grid(fusions=parse_list(fusions, name="fusions", cast=str),
                       shots=[None if s == "all" else int(s) for s in parse_list(shots, name="shots", cast=str)],
                       epochs=parse_list(epochs, name="epochs"), trials=trials, base=base)
        entry = resolve(cache, model, dataset, cache_dir)
        records = list(run_sweep(entry, configs, out=out, workers=workers, ray=ray_address, log=say).values())
    paths = render(records, out, curve_shots=curve)
    with open(paths["table"], encoding="utf-8") as f:
        click.echo(f.read())
    click.echo("plots: " + ", ".join(p for k, p in paths.items() if k != "table"))


if __name__ == "__main__":
    main()
