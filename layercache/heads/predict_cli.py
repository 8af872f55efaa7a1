"""`predict`: tag new text with a trained head and its backbone, and print the entities."""

from __future__ import annotations

import json
import os
import re
import sys

import click

from ..cli_util import friendly_errors
from ..errors import LayercacheError

# Words and single punctuation marks, with their character offsets: enough for raw sentences.
WORD = re.compile(r"\w+(?:[-'’.]\w+)*|[^\w\s]")


def split_words(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in WORD.finditer(text)]


def entities(tags: list[str], words: list[tuple[str, int, int]], text: str) -> list[dict]:
    """Entity spans from IOB2 tags (seqeval's chunking), with word and character offsets."""
    from seqeval.metrics.sequence_labeling import get_entities

    out = []
    for etype, start, end in get_entities(tags):  # end inclusive
        lo, hi = words[start][1], words[end][2]
        out.append({"text": text[lo:hi], "type": etype, "words": [start, end + 1], "chars": [lo, hi]})
    return out


class Tagger:
    """A checkpoint plus the backbone it needs (the fine-tuned one for an FT head)."""

    def __init__(self, checkpoint: str, *, device=None):
        import torch

        from .checkpoint import checkpoint_paths, load_checkpoint
        from .live import load_live_backbone

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.head, self.meta = load_checkpoint(checkpoint, device=str(self.device))
        backbone_dir = self.meta.get("backbone_path")
        if backbone_dir and not os.path.isabs(backbone_dir):  # stored relative to the checkpoint
            backbone_dir = os.path.join(os.path.dirname(checkpoint_paths(checkpoint)[1]), backbone_dir)
        cache = self.meta["cache"]
        self.backbone = load_live_backbone(cache, device=self.device, model_path=backbone_dir)
        self.backbone.eval()
        self.layers = self.meta["layers"]
        self.label_names = self.meta["label_names"]

    def tag(self, sentences: list[list[str]], *, batch_size: int = 32) -> list[list[str]]:
        import torch

        out = []
        with torch.inference_mode():
            for i in range(0, len(sentences), batch_size):
                chunk = sentences[i:i + batch_size]
                hidden, mask = self.backbone(chunk, self.layers)
                pred = self.head(hidden, mask).argmax(-1).cpu().numpy()  # [B, T]
                out += [[self.label_names[t] for t in pred[b, : len(chunk[b])]] for b in range(len(chunk))]
        return out


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
    tagger = Tagger(checkpoint, device=device)
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
