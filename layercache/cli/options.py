"""Click options that several commands share, declared once, and the parsers of their values."""

from __future__ import annotations

import click

from ..errors import LayercacheError
from ..fusions.dwatt import LAYER_SCORES
from ..training.config import PAPER_LR

CACHE_DIR_HELP = "Cache root (path or fsspec URL). Default: $LAYERCACHE_HOME or ~/.cache/layercache."
LAYERS_HELP = ("Layers: all (= 1..L), 4,8,12, 1..6 (0 = embedding output) or auto:K (the K of 1..L with the "
               "lowest variability nu).")


def _stack(*decorators):
    def apply(fn):
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn
    return apply


def cache_options(fn):
    """--cache, --model, --dataset, --cache-dir: which cache entry a command reads."""
    return _stack(
        click.option("--cache", default=None,
                     help="Path of a cache entry. Default: the entry for --model/--dataset, else the newest complete one."),
        click.option("--model", default=None, help="Backbone whose cache to use (extracted first when missing)."),
        click.option("--dataset", default=None, help="Dataset whose cache to use (as for `extract`)."),
        cache_dir_option,
    )(fn)


cache_dir_option = click.option("--cache-dir", default=None, help=CACHE_DIR_HELP)
device_option = click.option("--device", default=None, help="torch device. Default: cuda when present, else cpu.")


task_option = click.option(
    "--task", type=click.Choice(["ner", "mlm"]), default="ner", show_default=True,
    help="ner: named-entity tagging (F1); mlm: masked language modelling on raw text (perplexity; "
         "--dataset wiki-offline, wikitext-2 or a WikiText-style directory).")


def masking_options(fn):
    """--block-size, --mask-seed, --mlm-probability: the MLM cache's blocks and fixed masks (the
    entry `extract --task mlm` makes; FT draws its train masks per epoch with the same probability)."""
    return _stack(
        click.option("--block-size", type=click.IntRange(min=2), default=128, show_default=True,
                     help="MLM: subwords per block, special tokens included."),
        click.option("--mask-seed", type=int, default=0, show_default=True, help="MLM: seed of the fixed masks."),
        click.option("--mlm-probability", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.15,
                     show_default=True, help="MLM: share of tokens chosen for prediction (80% [MASK], 10% random, "
                                             "10% kept)."),
    )(fn)


def extract_options(task: str, *, block_size: int = 128, mask_seed: int = 0, mlm_probability: float = 0.15) -> dict:
    """The `ExtractConfig` fields that find (or make) a task's cache entry; {} for NER, whose
    entries are found as they always were."""
    if task == "ner":
        if (block_size, mask_seed, mlm_probability) != (128, 0, 0.15):
            raise LayercacheError("--block-size, --mask-seed and --mlm-probability need --task mlm")
        return {}
    return {"task": task, "block_size": block_size, "mask_seed": mask_seed, "mlm_probability": mlm_probability}


def layers_option(default: str | None = None, extra_help: str = ""):
    return click.option("--layers", default=default, show_default=default is not None,
                        help=LAYERS_HELP + (" " + extra_help if extra_help else ""))


PAPER_PROTOCOL = {"lr": PAPER_LR, "layer_score": "paper"}  # paper §5 and eqs. 3-11, where our defaults differ


def protocol_option(fn):
    return click.option("--protocol", type=click.Choice(["default", "paper"]), default="default", show_default=True,
                        help="paper: the paper's settings where layercache's defaults differ (lr 5e-5, DWAtt's "
                             "unscaled score); options given explicitly still win.")(fn)


layer_score_option = click.option(
    "--layer-score", type=click.Choice(LAYER_SCORES), default="scaled", show_default=True,
    help="DWAtt's score over layers: paper = q.k (unscaled, eqs. 3-11), scaled = q.k/sqrt(d), learned = "
         "q.k times a learned temperature.")


def apply_protocol(options: dict, protocol: str, *, names: dict | None = None) -> dict:
    """``options`` with the paper's values for every `PAPER_PROTOCOL` option not given explicitly
    (``names``: the click parameter of a field, where it differs)."""
    if protocol != "paper":
        return options
    ctx = click.get_current_context()
    source = lambda name: ctx.get_parameter_source((names or {}).get(name, name))  # noqa: E731
    given = {name for name in PAPER_PROTOCOL if source(name) == click.core.ParameterSource.COMMANDLINE}
    return {**options, **{k: v for k, v in PAPER_PROTOCOL.items() if k not in given}}


def resolve(cache, model, dataset, cache_dir, *, extract: dict | None = None):
    """The cache entry the shared cache options name (messages go to stderr); ``extract``: the
    `extract_options` of a task other than NER."""
    from ..experiments.find import resolve_entry

    return resolve_entry(cache=cache, model=model, dataset=dataset, cache_dir=cache_dir, extract_options=extract,
                         log=say)


def say(message: str) -> None:
    click.echo(message, err=True)


def parse_shots(value: str | int | None) -> int | None:
    """``N`` (sentences = N x entity types) or ``all``."""
    if value is None or str(value).strip().lower() == "all":
        return None
    try:
        shots = int(value)
    except ValueError:
        raise LayercacheError(f"--shots {value!r} is not a positive integer or 'all'") from None
    if shots < 1:
        raise LayercacheError(f"--shots {value!r} must be >= 1 (or 'all')")
    return shots


def parse_list(text: str, *, name: str, cast=int) -> list:
    """A comma-separated option value (``--shots 8,16``) as a list, each item cast."""
    try:
        values = [cast(x.strip()) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise LayercacheError(f"--{name} {text!r} is not a comma-separated list") from None
    if not values:
        raise LayercacheError(f"--{name} is empty")
    return values
