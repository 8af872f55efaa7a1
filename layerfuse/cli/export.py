"""`layerfuse export`: a trained head plus its backbone as a transformers model folder."""

from __future__ import annotations

import click

from .errors import NOTHING_TO_RESUME, friendly_errors
from .options import NAME_OR_PATH, UserPath, moved_model_option


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("head", type=NAME_OR_PATH, metavar="HEAD")
@click.option("--out", required=True, type=UserPath(file_okay=False),
              help="Folder to write (config.json, model.safetensors, the tokenizer, README.md).")
@click.option("--device", default=None, help="torch device for loading. Default: cpu.")
@click.option("--run", "run", default=None, metavar="RUN_ID",
              help="HEAD is a sweep's --out folder: the run whose kept head to export (its run_id in results.jsonl).")
@click.option("--best", is_flag=True,
              help="HEAD is a sweep's --out folder: the kept head with the best dev score; with --run, the best "
                   "of that run's cell (the same setting, any seed).")
@moved_model_option
@friendly_errors(interrupted=NOTHING_TO_RESUME)
def main(head, out, device, run, best, model):
    """Write HEAD (a run's JSON record or its head checkpoint, or with --run/--best a sweep's folder)
    with its backbone as a transformers model: AutoModelForTokenClassification.from_pretrained(OUT) and
    pipeline("token-classification", model=OUT) load it once layerfuse is imported."""
    import os

    from ..errors import OptionError
    from ..experiments.heads import sweep_head
    from ..experiments.results import RESULTS
    from ..hf.export import export_head

    if not out.strip():  # "No such file or directory", naming nothing
        raise OptionError("--out is empty: name the folder to write the model to")
    if run is not None or best or os.path.isfile(os.path.join(head, RESULTS)):
        head = sweep_head(head, run=run, best=best, log=lambda message: click.echo(message, err=True))
    folder = export_head(head, out, device=device, model=model)
    click.echo(f"exported {head} -> {folder} (load: import layerfuse; "
               f"transformers.pipeline('token-classification', model={folder!r}))")


if __name__ == "__main__":
    main()
