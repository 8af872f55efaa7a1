"""A fusion's own settings (`Fusion.options`): each one an `Option`, declared once, in its fusion's
class, with its default, the values it takes, its help text, what ran before it existed, whether
it names a run and a report's row, and how plots draw the runs at some of its values (`Style`).

The rest of the library reads the declarations alone: a run's config and a head's config carry the
values by name (`takes_options`), the command line makes a flag of each, run ids and report rows
name the values away from the default, checkpoints written before an option existed load with the
value they ran. Torch-free.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

from layerfuse.errors import OptionError


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()  # an `Option`'s ``before`` or ``paper`` not declared


@dataclass(frozen=True)
class Style:
    """How every plot draws a head: a matplotlib colour and marker, and what its legend calls it.

    A fusion's own (`Fusion.style`) is its runs' look; an option's, for one of its values
    (`Option.styles`), is that of the fusion's runs at the value: None there keeps the fusion's
    colour or marker, and its label follows the fusion's ("dwatt, paper's score"). A fusion that
    declares none gets a look from a hash of its name (`layerfuse.experiments.plots.head_style`).
    """

    colour: str | None = None
    marker: str | None = None
    label: str | None = None  # None: the fusion's name; an option value's: the value


@dataclass(frozen=True)
class Option:
    """One setting of a fusion: a keyword of its constructor, a key of run records and checkpoints."""

    name: str
    default: object
    help: str  # for the command line, which adds the default and the fusions that read it
    type: type = str  # of a value given on the command line
    choices: tuple = ()  # the values it takes; () = any of ``type``
    minimum: float | None = None  # the least value it takes (None, where it is the default, stays allowed)
    maximum: float | None = None  # the most it takes (a typo's 99999 layers filled the memory before a line)
    # a default of None is picked by the backbone's depth (its layer count; None when unknown)
    by_depth: Callable[[int | None], object] | None = None
    # what ran before the option existed: records and heads without it read it so, and run ids name the
    # values away from it (so ids of runs made before it stay as they were); UNSET = the default
    before: object = UNSET
    paper: object = UNSET  # the paper's value, where the default differs (`--protocol paper`)
    names_run: bool = True  # a value away from ``before`` enters the run id
    names_row: bool = True  # a value away from the default names the report's row
    # (value, Style) pairs: how plots draw the fusion's runs at the value (its report row, "dwatt (paper)";
    # the default's where it is spelt out); a value without one is drawn as the fusion is
    styles: tuple[tuple[object, Style], ...] = ()

    @property
    def legacy(self):
        """The value of a record or a head written before the option existed."""
        return self.default if self.before is UNSET else self.before

    def check(self, value) -> None:
        if value is None and self.default is None:
            return
        if self.choices and value not in self.choices:
            raise OptionError(f"{self.name} must be one of {', '.join(map(str, self.choices))}, got {value!r}")
        if self.minimum is not None and not (isinstance(value, (int, float)) and value >= self.minimum):
            raise OptionError(f"{self.name} must be >= {self.minimum}, got {value!r}")
        if self.maximum is not None and not (isinstance(value, (int, float)) and value <= self.maximum):
            raise OptionError(f"{self.name} must be <= {self.maximum}, got {value!r}")

    def value(self, given: Mapping, *, num_layers: int | None = None):
        """The value a head is built with, from ``given`` (name -> value; missing = the default),
        checked, a default of None picked by depth (``num_layers``: the backbone's layers)."""
        value = given.get(self.name, self.default)
        self.check(value)
        return self.by_depth(num_layers) if value is None and self.by_depth is not None else value

    def parse(self, text: str):
        """A command-line value: raises ValueError (a bad number) or LayerfuseError (a bad value)."""
        value = self.type(text)
        self.check(value)
        return value

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def takes_options(cls):
    """``cls``, a dataclass with an ``options`` field ((name, value) pairs), whose constructor also takes
    each option as a keyword of its own (``name=value``), as records and checkpoints spell
    them: every keyword that is no field of ``cls`` is an option. ``options`` is kept sorted by name,
    so equal settings make equal configs."""
    init = cls.__init__
    field_names = {f.name for f in fields(cls)}

    @functools.wraps(init)
    def __init__(self, *args, options=(), **kwargs):
        given = {name: kwargs.pop(name) for name in [k for k in kwargs if k not in field_names]}
        init(self, *args, options=tuple(sorted({**dict(options), **given}.items())), **kwargs)

    cls.__init__ = __init__
    return cls
