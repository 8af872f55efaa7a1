"""The tasks a cache entry holds and a head learns: one object per task, asked by extraction,
training, checkpoints, inference and the command line instead of comparing names.

The name stays what is written down (the cache entry's ``task`` attribute, a checkpoint's
``task``, a results record's ``config["task"]``, ``--task``); `task_of` turns any of those back
into the object. Entries, checkpoints and records from before tasks existed carry no name: they
are NER (`DEFAULT_TASK`).

A new task (POS or chunk tagging, say) is one more `Task` in `TASKS`, plus its training behaviour
in `layerfuse.training.tasks`: the one registry where a task meets its head, the head's class
itself (`head_class`), which this module cannot see. This module imports nothing heavy, nor
anything of the project but `layerfuse.errors`, so the command line can list the tasks without
loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import LayerfuseError


@dataclass(frozen=True)
class Task:
    name: str  # what caches, checkpoints, results and --task say
    labels_from_data: bool  # the labels are tag classes read from the dataset: C and nu exist, auto:K ranks by them
    masks_inputs: bool  # raw text cut into blocks, tokens masked at extraction; the entry keeps lm/* for the decoder
    granularity: str | None  # the cache granularity the task needs; None = word or subword, the user's choice
    headline: str  # the metric a run reports: "f1" (higher is better) or "ppl" (perplexity, lower is better)
    default_dataset: str  # the dataset extract uses when none is named
    units: tuple[str, str]  # what a cache entry's sequences and rows are called in messages
    checkpoint_version: int  # the format version its head checkpoints are written with

    @property
    def is_default(self) -> bool:
        """Whether a command line or a record may leave the task out."""
        return self.name == DEFAULT_TASK

    @property
    def flag(self) -> str:
        """What a suggested command line adds for this task: nothing for the default, else `` --task NAME``."""
        return "" if self.is_default else f" --task {self.name}"


NER = Task(
    name="ner", labels_from_data=True, masks_inputs=False, granularity=None, headline="f1",
    default_dataset="wnut16", units=("sentences", "words"),
    checkpoint_version=2,  # unchanged since the tagger recorded the fusions' own settings
)
MLM = Task(
    name="mlm", labels_from_data=False, masks_inputs=True, granularity="subword", headline="ppl",
    default_dataset="wiki-offline", units=("blocks", "tokens"),
    checkpoint_version=3,  # older readers refuse it by name
)
TASKS = {task.name: task for task in (NER, MLM)}
DEFAULT_TASK = NER.name


def task_of(source) -> Task:
    """The task of a name (``"mlm"``), of a mapping that may hold one (cache metadata, a checkpoint's
    metadata, a record's config; none = NER), or of a config with a ``task`` field."""
    if isinstance(source, Task):
        return source
    if source is None or isinstance(source, str):
        name = source
    elif isinstance(source, dict) or hasattr(source, "get"):
        name = source.get("task")
    else:
        name = source.task
    name = DEFAULT_TASK if name is None else name
    if name not in TASKS:
        raise LayerfuseError(f"--task {name!r} is not one of {', '.join(TASKS)}")
    return TASKS[name]
