"""`layerfuse export`: a trained head plus its backbone as a transformers model folder."""

from __future__ import annotations

import click

from .errors import friendly_errors


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("head", metavar="HEAD")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Folder to write (config.json, model.safetensors, the tokenizer, README.md).")
@click.option("--device", default=None, help="torch device for loading. Default: cpu.")
@friendly_errors
def main(head, out, device):
    """Write HEAD (a run's JSON record or its head checkpoint) with its backbone as a transformers
    model: AutoModelForTokenClassification.from_pretrained(OUT) and
    pipeline("token-classification", model=OUT) load it once layerfuse is imported."""
    from ..hf.export import export_head

    folder = export_head(head, out, device=device)
    click.echo(f"exported {head} -> {folder} (load: import layerfuse; "
               f"transformers.pipeline('token-classification', model={folder!r}))")


if __name__ == "__main__":
    main()
