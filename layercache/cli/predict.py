"""`predict`: tag new text with a trained head and its backbone, and print the entities."""

from __future__ import annotations

import json
import sys

import click

from ..errors import LayercacheError
from .errors import friendly_errors

@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--head", "checkpoint", required=True, help="Head checkpoint (.safetensors/.json or their stem).")
@click.option("--text", multiple=True, help="A sentence to tag (repeatable).")
@click.option("--file", "file_", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="One sentence per line ('-' = stdin).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per sentence.")
@click.option("--device", default=None, help="torch device. Default: cuda when present, else cpu.")
@friendly_errors
def main(checkpoint, text, file_, as_json, device):
    """Tag raw sentences with a trained head and print the entities found."""
    lines = list(text)
    if file_:
        try:
            with click.open_file(file_, encoding="utf-8") as f:
                lines += [line.rstrip("\n") for line in f]
        except UnicodeDecodeError as exc:
            raise LayercacheError(f"{file_} is not UTF-8 text (byte {exc.start})") from None
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise LayercacheError("nothing to tag: pass --text or --file")
    from ..inference import Predictor, entities, split_words

    tagger = Predictor(checkpoint, device=device)
    words = [split_words(line) for line in lines]
    tags = tagger.tag([[w for w, _, _ in ws] for ws in words])
    for line, ws, ts in zip(lines, words, tags):
        found = entities(ts, ws, line)
        if as_json:
            click.echo(json.dumps({"text": line, "words": [w for w, _, _ in ws], "tags": ts, "entities": found},
                                  ensure_ascii=False))
            continue
        click.echo(line)
        for e in found:
            click.echo(f"  {e['type']:<8} {e['text']!r}  words {e['words'][0]}-{e['words'][1]}  "
                       f"chars {e['chars'][0]}-{e['chars'][1]}")
        if not found:
            click.echo("  (no entities)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
