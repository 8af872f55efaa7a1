"""`layerfuse predict`: tag new text with a trained head and its backbone, and print the entities; score it on
a labelled CoNLL file (`--conll`); or, with an MLM head, fill the masks of `--fill-mask` texts and print the top
tokens of each."""

from __future__ import annotations

import json
import os
import sys

import click

from ..errors import LayerfuseError, OptionError, not_utf8
from ..files import text_saved
from ..inference.fill_mask import MaskFiller
from ..tasks import task_of
from ..training.checkpoint import checkpoint_paths
from .errors import NOTHING_TO_RESUME, friendly_errors
from .options import NAME_OR_PATH, UserPath, default_of, moved_model_option, quiet_option, say
from .progress import show_progress


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--head", "--checkpoint", "checkpoint", type=NAME_OR_PATH, required=True,
              help="Head checkpoint (.safetensors/.json or their stem), or the run record train-head writes "
                   "beside it (<run>.json).")
@click.option("--text", multiple=True, help="A sentence to tag (repeatable).")
@click.option("--file", "files", type=UserPath(dir_okay=False, allow_dash=True), multiple=True,
              help="One sentence per line ('-' = stdin; repeatable: the files' lines in order).")
@click.option("--fill-mask", "fill_mask", multiple=True,
              help="MLM heads: a text with [MASK] (or <mask>) to fill (repeatable); "
                   "--text/--file lines are filled too.")
@click.option("--top-k", type=click.IntRange(min=1), default=default_of(MaskFiller.fill, "top_k"), show_default=True,
              help="Tokens printed per mask.")
@click.option("--conll", "conll", type=UserPath(dir_okay=False), default=None,
              help="Score the head on a labelled CoNLL file (one word a line, the gold tag where the head's training "
                   "data had it: the last column, or as that data's --columns or this --columns say, or the column "
                   "of the head's label set for a pos or chunk head of a CoNLL-2003-layout file; blank "
                   "lines between sentences, -DOCSTART- lines skipped): writes 'word gold pred' lines (conlleval's "
                   "input; gold normalised to IOB2) and prints precision, recall, F1 and support per entity type "
                   "plus the micro average, by the project's own metric (conlleval's chunking, seqeval's default "
                   "mode), so the micro F1 is what training reports on the same words (for a head trained at fp32).")
@click.option("--columns", default=None, metavar="NAME=N,...",
              help="With --conll: the file's 0-based columns of the words and the tags, as for extract (e.g. "
                   "word=0,ner=1). Default: those the head's training data was read with.")
@click.option("--out", "out", type=UserPath(dir_okay=False, writable=True), default=None,
              help="With --conll: write the 'word gold pred' lines here (default: stdout, the report then goes "
                   "to stderr).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per sentence (--conll: the report).")
@click.option("--device", default=None, help="torch device. Default: cuda when present, else cpu.")
@moved_model_option
@quiet_option
@friendly_errors(interrupted=NOTHING_TO_RESUME)
def main(checkpoint, text, files, fill_mask, top_k, conll, columns, out, as_json, device, model, quiet):
    """Tag raw sentences with a trained head and print the entities found, or score it on a labelled
    CoNLL file (--conll); MLM heads: fill masks.

    Words of raw text: runs of letters and digits; each punctuation mark or symbol is a word of its
    own (Jean-Claude is Jean, -, Claude), as an exported model's tokenizer splits them."""
    if conll:
        if text or files or fill_mask:
            raise OptionError("--conll takes no --text, --file or --fill-mask")
        head = _head(checkpoint)
        if out:
            _refuse_inputs_as_out(out, {conll, checkpoint, *checkpoint_paths(head)})
        _score_conll(head, conll, columns=columns, out=out, as_json=as_json, device=device, model=model)
        return
    if out or columns:
        raise OptionError(f"{'--out' if out else '--columns'} goes with --conll")
    lines = list(fill_mask) + list(text)
    for file_ in files:
        if file_ == "-" and sys.stdin is None:  # closed (`<&-`): click's reader failed on None
            raise LayerfuseError("--file -: stdin is closed")
        try:  # utf-8-sig: a byte-order mark (a file saved on Windows) is no part of the first word
            with click.open_file(file_, encoding="utf-8-sig") as f:
                lines += [line.rstrip("\n") for line in f]
        except UnicodeDecodeError:  # a file is read again for its line; stdin cannot be
            raise (not_utf8(file_) if file_ != "-" else LayerfuseError("stdin is not UTF-8 text")) from None
    if not lines:
        if not files:  # no input named: the call is wrong; a --file holding nothing is the file's
            raise OptionError("nothing to tag: pass --text, --file or --fill-mask")
        raise LayerfuseError(f"nothing to tag: --file {', '.join(files)} {'holds' if len(files) == 1 else 'hold'} "
                             "no line")
    if not any(line.strip() for line in lines):
        given = f"--file {', '.join(files)} {'has' if len(files) == 1 else 'have'}" if files else "the text given has"
        raise LayerfuseError(f"nothing to {'fill' if fill_mask else 'tag'}: {given} only blank lines")
    checkpoint = _head(checkpoint)
    if fill_mask or _is_mlm(checkpoint):
        _fill(checkpoint, [line for line in lines if line.strip()], top_k=top_k, as_json=as_json, device=device,
              model=model)
    else:  # a blank line of --file gets its (empty) answer too: output line k answers input line k
        _tag(checkpoint, lines, as_json=as_json, device=device, model=model, quiet=quiet)
    sys.stdout.flush()


def _head(path: str) -> str:
    """The head checkpoint of ``path``: the run record train-head prints (<run>.json) names its head, as
    export reads it; a checkpoint is itself."""
    from ..training.run_record import as_run_record, resolve_head

    path = as_run_record(path)
    return resolve_head(path)[0] if path.endswith(".json") else path


def _refuse_inputs_as_out(out: str, inputs: set[str]) -> None:
    """``--out`` is written whole: never over the CoNLL file scored, nor the head's own files."""
    if any(os.path.exists(p) and os.path.exists(out) and os.path.samefile(out, p) for p in inputs):
        raise OptionError(f"--out {out} is one of this command's inputs; name another file")


def _is_mlm(checkpoint: str) -> bool:
    try:
        with open(checkpoint_paths(checkpoint)[1], encoding="utf-8") as f:
            return task_of(json.load(f)).masks_inputs
    except (OSError, ValueError, LayerfuseError):
        return False  # loading it says what is wrong


def _fill(checkpoint, lines, *, top_k: int, as_json: bool, device, model) -> None:
    filler = MaskFiller(checkpoint, device=device, model=model)
    for line in lines:
        masks = filler.fill(line, top_k=top_k)
        if as_json:
            click.echo(json.dumps({"text": line, "masks": masks}, ensure_ascii=False))
            continue
        click.echo(line)
        for k, m in enumerate(masks, 1):
            shown = (f"{t['token']} ({_probability(t['probability'])})" for t in m["top"])
            click.echo(f"  mask {k}: " + ", ".join(shown))


def _tag(checkpoint, lines, *, as_json: bool, device, model, quiet: bool = False) -> None:
    from tqdm.auto import tqdm

    from ..cache.label_sets import TOKEN
    from ..inference import Predictor

    tagger = Predictor(checkpoint, device=device, model=model)
    token_set = tagger.meta.get("cache", {}).get("label_kind") == TOKEN
    # Tagged and printed a block of lines at a time: a long --file shows its first answers at once, where it
    # printed nothing until every line was tagged; with the answers going to a file, a bar on the terminal.
    # the answers on the terminal need no bar beside them; else as every command: stderr a terminal, no --quiet
    with tqdm(total=len(lines), unit="line", desc="predict", leave=False,
              disable=sys.stdout.isatty() or not show_progress(quiet)) as bar:
        for lo in range(0, len(lines), LINES_PER_BLOCK):
            block = lines[lo:lo + LINES_PER_BLOCK]
            words = [tagger.words(line) for line in block]
            tags = tagger.tag([[w for w, _, _ in ws] for ws in words])
            (_echo_tokens if token_set else _echo_entities)(block, words, tags, as_json=as_json)
            sys.stdout.flush()
            bar.update(len(block))


LINES_PER_BLOCK = 256  # lines of --text/--file tagged and printed together


def _echo_tokens(lines, words, tags, *, as_json: bool) -> None:
    """POS and the like: a tag per word, no spans."""
    for line, ws, ts in zip(lines, words, tags):
        if as_json:
            click.echo(json.dumps({"text": line, "words": [w for w, _, _ in ws], "tags": ts}, ensure_ascii=False))
        else:
            click.echo(line + "\n  " + " ".join(f"{w}/{t}" for (w, _, _), t in zip(ws, ts)))


def _echo_entities(lines, words, tags, *, as_json: bool) -> None:
    from ..inference import entities

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


def _score_conll(checkpoint, path: str, *, columns, out, as_json: bool, device, model) -> None:
    from ..cache.label_sets import TOKEN
    from ..inference import Predictor
    from ..inference import conll_eval as ce
    from ..training.checkpoint import read_checkpoint_meta

    meta = read_checkpoint_meta(checkpoint)
    cache = meta.get("cache", {})
    token_set = cache.get("label_kind") == TOKEN
    # a bad file fails before the backbone loads
    sentences = ce.read_for_head(path, cache, columns=columns)
    tagger = Predictor(checkpoint, device=device, model=model)
    (ce.check_known_tokens if token_set else ce.check_known)(path, sentences, tagger.label_names)
    pred = tagger.tag([words for words, _ in sentences])
    lines = ce.conll_lines(sentences, pred)
    if out:  # whole or not at all: a full disk left a cut file over the user's last one
        text_saved(out, "".join(line + "\n" for line in lines))
    else:
        for line in lines:
            click.echo(line)
    gold = [tags for _, tags in sentences]
    report = ce.token_report(gold, pred) if token_set else ce.span_report(gold, pred, tagger.label_names)
    scored_in = (meta.get("config") or {}).get("precision") or "fp32"
    stored = (meta.get("cache") or {}).get("dtype")
    note = None
    if scored_in != "fp32":  # training's scores came from autocast passes; these from float32 ones
        note = (f"training scored this head under {scored_in} autocast; predict runs float32, so its figures "
                "can differ slightly from the training's (train with --precision fp32 for the same)")
    elif stored == "int8" and (meta.get("config") or {}).get("mode") != "ft":  # a lossy cache: other inputs
        note = ("training scored this head on the entry's int8 hidden states; predict runs the backbone live, "
                "so its figures differ from the training's by what int8 rounded away")
    if as_json:  # one JSON object on its stream, the note in it: a line after it made the stream no JSON
        click.echo(json.dumps({**report, **({"note": note} if note else {})}), err=not out)
        return
    click.echo((ce.format_token_report if token_set else ce.format_report)(report), err=not out)
    if note:
        say(f"note: {note}")


def _probability(p: float) -> str:
    """A probability to read: 0.032, not 0.0320 or 3.2e-02; one under 0.001 in scientific form (0.000 hid it)."""
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


if __name__ == "__main__":
    main()
