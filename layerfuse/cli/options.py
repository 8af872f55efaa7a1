"""Click options that several commands share, declared once, and the parsers of their values."""

from __future__ import annotations

import functools
import inspect
from dataclasses import MISSING, fields, is_dataclass

import click

from ..errors import LayerfuseError, OptionError
from ..extract.run import ExtractConfig
from ..fusions.config import QUERY_LAYERS
from ..fusions.options import UNSET, Option
from ..fusions.registry import declared_options, owned_options
from ..seeds import SEED_LIMIT, is_seed
from ..tasks import TASKS, task_of
from ..training.config import PAPER_LR, TrainConfig
from .light_options import NAME_OR_PATH, UserPath, cache_dir_option, quiet_option  # noqa: F401 (the other commands take every option from here)
from .progress import show_progress

LAYERS_HELP = ("Layers: all (= 1..L), 4,8,12, 1..6 (0 = embedding output), auto:K (the K of 1..L with the "
               "lowest variability nu) or xie[:K] (Xie et al.'s rule: the classifier on the lowest-nu layer, the "
               "layers above it dropped; the K layers ending there, fewer when fewer candidates lie below it, "
               "default 1).")

FUSION_HELP = ("The head over the cached layers: base (a linear classifier on the top layer), concat (one linear "
               "map of the fused layers side by side), dwatt (depth-wise attention over the fused layers), extra "
               "(transformer layers on the top layer, then the classifier) or scalarmix (a learned weighted sum of "
               "the fused layers).")
BATCH_SIZE_HELP = "Sentences per batch (MLM: blocks)."


def default_of(owner, name: str):
    """The default that a config dataclass declares for field ``name`` (or a function for its
    parameter ``name``): options read it from there, so a default is written once and the CLI
    cannot drift from the Python API."""
    if not is_dataclass(owner):
        parameter = inspect.signature(owner).parameters.get(name)
        if parameter is None or parameter.default is inspect.Parameter.empty:
            raise AttributeError(f"{owner.__qualname__} has no parameter {name!r} with a default")
        return parameter.default
    field = next((f for f in fields(owner) if f.name == name), None)
    if field is None:
        raise AttributeError(f"{owner.__name__} has no field {name!r}")
    if field.default is not MISSING:
        return field.default
    if field.default_factory is not MISSING:
        return field.default_factory()
    raise AttributeError(f"{owner.__name__}.{name} has no default")


class GeneratedHelp(click.Option):
    """An option whose help text is made each time it is shown (``make_help``), as what it lists (the
    dataset formats) may be registered after the command is declared."""

    def __init__(self, *args, make_help, **kwargs):
        self._make_help = make_help
        super().__init__(*args, **kwargs)

    @property
    def help(self) -> str:
        return self._make_help()

    @help.setter
    def help(self, value) -> None:
        """Ignored: click sets the declared text, which this option makes afresh instead."""


def _stack(*decorators):
    def apply(fn):
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn
    return apply


def dataset_reading_options(fn):
    """--columns, --tokens-field, --tags-field: which columns of CoNLL-style files, or which fields of a
    HF dataset, hold the words and the tags of --dataset (a bad value fails when the dataset is read).
    The command gets them as one ``read`` argument: the `ExtractConfig` fields given ({} for none), which
    travel in the config that finds or makes the entry."""
    @functools.wraps(fn)
    def with_reading(*args, columns=None, tokens_field=None, tags_field=None, **kwargs):
        given = {"columns": columns, "tokens_field": tokens_field, "tags_field": tags_field}
        return fn(*args, read={name: value for name, value in given.items() if value is not None}, **kwargs)

    return _stack(
        click.option("--columns", default=None, metavar="NAME=N,...",
                     help="CoNLL-style files: the 0-based columns of the words and the tags, e.g. word=0,ner=3; more "
                          "names are more label sets (pos=1,chunk=2: chunk as spans, any other name as word "
                          "classes). Without ner the first set named is the primary one and columns not named "
                          "are not read (word=0,pos=1: a POS-tagged file). Default: the word first, the tag "
                          "last (CoNLL-2003's pos and chunk between)."),
        click.option("--tokens-field", default=None, metavar="NAME",
                     help="HF datasets: the field of the words. Default: tokens."),
        click.option("--tags-field", default=None, metavar="NAME",
                     help="HF datasets: the field of the tags (a sequence of ClassLabel or of tag strings). "
                          "Default: ner_tags."),
    )(with_reading)


def cache_options(fn):
    """--cache, --model, --dataset (and how it is read), --cache-dir: which cache entry a command reads."""
    return _stack(
        click.option("--cache", type=NAME_OR_PATH, default=None,
                     help="Path of a cache entry. Default: the entry for --model/--dataset; without them the "
                          "built-in default's (as extract), else the root's only complete entry."),
        click.option("--model", type=NAME_OR_PATH, metavar="NAME|DIR", default=None,
                     help="Backbone whose cache to use (extracted first when missing)."),
        click.option("--dataset", default=None, help="Dataset whose cache to use (as for `extract`)."),
        dataset_reading_options,
        cache_dir_option,
    )(fn)


device_option = click.option("--device", default=None, help="torch device. Default: cuda when present, else cpu.")
# predict and export: a head records the folder its backbone was read from; moved, that folder is named here
moved_model_option = click.option(
    "--model", type=NAME_OR_PATH, default=None, metavar="DIR",
    help="The backbone's folder, where the one the head names has moved (checked against its revision).")
SEED = click.IntRange(0, SEED_LIMIT - 1)


def seed_item(text: str) -> int:
    """One seed of a comma-separated list (probe's --seeds), checked as `SEED` checks --seed."""
    seed = int(text)
    if not is_seed(seed):
        raise ValueError(text)
    return seed


task_option = click.option(
    "--task", type=click.Choice(list(TASKS)), default=default_of(TrainConfig, "task"), show_default=True,
    help="ner: named-entity tagging (F1); mlm: masked language modelling on raw text (perplexity; "
         "--dataset wiki-offline, wikitext-2 or a WikiText-style directory).")


labels_option = click.option(
    "--labels", default=default_of(TrainConfig, "labels"), metavar="NAME",
    help="The entry's label set to use (ner, pos, chunk, upos, xpos, deprel; `layerfuse info` lists them): span "
         "sets score span F1, token sets (POS) token accuracy. Default: the entry's primary set (ner; the first "
         "set --columns names where it names no ner).")


def masking_options(fn):
    """--block-size, --mask-seed, --mlm-probability: the MLM cache's blocks and fixed masks (the
    entry `extract --task mlm` makes; FT draws its train masks per epoch with the same probability)."""
    return _stack(
        click.option("--block-size", type=click.IntRange(min=2), default=default_of(ExtractConfig, "block_size"),
                     show_default=True, help="MLM: subwords per block, special tokens included."),
        click.option("--mask-seed", type=SEED, default=default_of(ExtractConfig, "mask_seed"), show_default=True,
                     help="MLM: seed of the fixed masks."),
        click.option("--mlm-probability", type=click.FloatRange(0, 1, min_open=True, max_open=True),
                     default=default_of(ExtractConfig, "mlm_probability"), show_default=True,
                     help="MLM: share of tokens chosen for prediction (80% [MASK], 10% random, 10% kept)."),
    )(fn)


MASKING = ("block_size", "mask_seed", "mlm_probability")  # the `masking_options` fields of ExtractConfig


def extract_options(task: str, **masking) -> dict:
    """The `ExtractConfig` fields that find (or make) a task's cache entry; {} for NER, whose
    entries are found as they always were. ``masking``: the `MASKING` fields given (others: defaults)."""
    masking = {name: masking.get(name, default_of(ExtractConfig, name)) for name in MASKING}
    if not task_of(task).masks_inputs:
        if any(value != default_of(ExtractConfig, name) for name, value in masking.items()):
            raise OptionError("--block-size, --mask-seed and --mlm-probability need --task mlm")
        return {}
    return {"task": task, **masking}


def _given_layers(ctx, param, value):
    """An empty ``--layers ""`` (an unset shell variable, say) is refused: it read as every layer."""
    if value is not None and not value.strip():
        raise click.BadParameter("is empty: leave --layers out for the default, or name the layers")
    return value


def layers_option(default: str | None = None, extra_help: str = ""):
    return click.option("--layers", default=default, show_default=default is not None, callback=_given_layers,
                        help=LAYERS_HELP + (" " + extra_help if extra_help else ""))


def paper_protocol() -> dict:
    """The paper's settings where our defaults differ (§5 and eqs. 3-11): its rate, and each fusion's
    setting that declares the paper's value (`Option.paper`)."""
    return {"lr": PAPER_LR, **{name: option.paper for name, option in declared_options().items()
                               if option.paper is not UNSET}}


def protocol_option(fn):
    differ = ", ".join(f"{name.replace('_', '-')} {value:g}" if isinstance(value, float) else
                       f"{name.replace('_', '-')} {value}" for name, value in paper_protocol().items())
    return click.option("--protocol", type=click.Choice(["default", "paper"]), default="default", show_default=True,
                        help=f"paper: the paper's settings where layerfuse's defaults differ ({differ}); options "
                             "given explicitly still win.")(fn)


def fusion_option_flags(*, grid: bool = False):
    """A flag for each fusion's own setting (`Fusion.options`), made from its declaration, and
    ``--fusion-opt NAME=VALUE`` (repeatable) for any of them, those declared later too; `fusion_settings`
    reads what was given. ``grid``: each takes comma-separated values, a grid dimension (`sweep`)."""
    flags = [_grid_flag(option) if grid else _flag(option) for option in declared_options().values()]
    generic = click.option(
        "--fusion-opt", "fusion_opt", multiple=True, metavar="NAME=VALUE" + (",..." if grid else ""),
        help="A fusion's own setting by name, as its flag sets it (repeatable; wins over the flag): "
             f"{', '.join(declared_options()) or 'none'}.")
    return _stack(*flags, generic)


def _flag(option: Option):
    kind = click.Choice(list(option.choices)) if option.choices else _ranged(option)
    return click.option(option.flag, option.name, type=kind, default=option.default,
                        show_default=option.default is not None, help=option.help)


def _grid_flags(option: Option) -> list[str]:
    """A setting's flags in a grid: the plural first (``--<name>s``, unless it ends in s), then the singular."""
    return [option.flag] if option.flag.endswith("s") else [option.flag + "s", option.flag]


def _grid_flag(option: Option):
    owners = ", ".join(sorted(owned_options()[option.name]))
    return click.option(*_grid_flags(option), option.name,
                        default=None if option.default is None else str(option.default),
                        show_default=option.default is not None,
                        help=f"{option.help} Comma-separated: a grid dimension for {owners} only.")


def _ranged(option: Option):
    if option.minimum is None or option.type not in (int, float):
        return option.type
    return (click.IntRange if option.type is int else click.FloatRange)(min=option.minimum)


def fusion_settings(params: dict, *, grid: bool = False) -> dict:
    """The fusions' settings a command was given, by name, taken out of its ``params``: each flag of
    `fusion_option_flags`, then every ``--fusion-opt`` (which wins). ``grid``: a list of values each."""
    declared = declared_options()
    settings = {name: params.pop(name) for name in declared if name in params}
    if grid:  # comma-separated text, or values the protocol set
        settings = {name: value if isinstance(value, list) else
                    _values(declared[name], value, _grid_flags(declared[name])[0], grid=True)
                    for name, value in settings.items()}
    for pair in params.pop("fusion_opt", None) or ():
        name, _, text = pair.partition("=")
        name = name.strip().replace("-", "_")
        if name not in declared:
            raise OptionError(f"--fusion-opt {pair!r}: no fusion has an option {name!r} (the fusions' "
                              f"options: {', '.join(declared) or 'none'})")
        settings[name] = _values(declared[name], text, f"--fusion-opt {name}", grid=grid)
    return settings


def _values(option: Option, text, flag: str, *, grid: bool):
    """``text`` as a value of ``option`` (``grid``: comma-separated values, a list); None (the default
    left as it is) stays None, [None] in a grid. ``flag`` names it in an error."""
    if text is None:
        return [None] if grid else None
    bounds = [f"{sign} {bound:g}" for sign, bound in ((">=", option.minimum), ("<=", option.maximum))
              if bound is not None]
    what = (f"one of {', '.join(map(str, option.choices))}" if option.choices else
            " ".join([_WHAT.get(option.type, "valid"), " and ".join(bounds)]).strip())

    def cast(item: str):
        try:
            return option.parse(item)
        except LayerfuseError:
            raise ValueError(item) from None

    if grid:
        return parse_list(text, name=flag.removeprefix("--"), cast=cast, what=what)
    try:
        return cast(str(text).strip())
    except ValueError:
        raise OptionError(f"{flag} {text!r} is not {what}") from None


query_layer_option = click.option(
    "--query-layer", type=click.Choice(QUERY_LAYERS), default=default_of(TrainConfig, "query_layer"),
    show_default=True,
    help="z_L, DWAtt's query and residual, Base's output and the extra layers' input: fused = the last "
         "layer of --layers; top = the backbone's top layer, read even when it is not fused (the fused "
         "layers stay --layers). Concat and ScalarMix have no z_L and ignore it.")


def apply_protocol(options: dict, protocol: str, *, names: dict | None = None) -> dict:
    """``options`` with the paper's values for every `paper_protocol` option not given explicitly
    (``names``: the click parameter of a field, where it differs)."""
    if protocol != "paper":
        return options
    ctx = click.get_current_context()
    source = lambda name: ctx.get_parameter_source((names or {}).get(name, name))  # noqa: E731
    paper = paper_protocol()
    given = {name for name in paper if source(name) == click.core.ParameterSource.COMMANDLINE}
    return {**options, **{k: v for k, v in paper.items() if k not in given}}


def resolve(cache, model, dataset, cache_dir, *, read: dict | None = None, extract: dict | None = None,
            quiet: bool = False):
    """The cache entry the shared cache options name (messages go to stderr); ``read``: how --dataset
    is read (`dataset_reading_options`); ``extract``: the `extract_options` of a task other than NER;
    ``quiet``: no progress bar when it must be extracted."""
    from ..experiments.find import resolve_entry

    check_one_source(cache, model, dataset)
    return resolve_entry(cache=cache, model=model, dataset=dataset, cache_dir=cache_dir,
                         extract_options={**(extract or {}), **(read or {})}, log=say, progress=show_progress(quiet))


def check_one_source(cache, model, dataset) -> None:
    """--cache, or --model/--dataset: both, and the entry named was used, the others dropped in silence."""
    if cache and (model or dataset):
        given = " and ".join(f for f, v in (("--model", model), ("--dataset", dataset)) if v)
        raise OptionError(f"--cache names the entry itself; {given} pick one by what it was made from: give one "
                          "or the other")


def say(message: str) -> None:
    click.echo(message, err=True)


def parse_shots(value: str | int | None) -> int | None:
    """``N`` (sentences = N x C, the label set's entity types or word classes) or ``all``."""
    if value is None or str(value).strip().lower() == "all":
        return None
    try:
        shots = int(value)
    except ValueError:
        raise OptionError(f"--shots {value!r} is not a positive integer or 'all'") from None
    if shots < 1:
        raise OptionError(f"--shots {value!r} must be >= 1 (or 'all')")
    return shots


def parse_list(text: str, *, name: str, cast=int, what: str | None = None) -> list:
    """A comma-separated option value (``--shots 8,16``) as a list, each item cast; a bad item is a
    one-line error naming it (``cast`` raises ValueError or LayerfuseError; ``what``: what an item is)."""
    values = []
    for item in (x.strip() for x in str(text).split(",")):
        if not item:
            continue
        try:
            values.append(cast(item))
        except ValueError:
            raise OptionError(f"--{name} {text!r}: {item!r} is not {what or _WHAT.get(cast, 'valid')}") from None
    if not values:
        raise OptionError(f"--{name} is empty")
    return values


_WHAT = {int: "an integer", float: "a number", seed_item: f"a seed in 0..{SEED_LIMIT - 1}"}
