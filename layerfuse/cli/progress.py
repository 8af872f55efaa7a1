"""Progress bars of the commands that train: one per `train-head` run (steps, the running training
loss and the last dev score), one for a sweep's grid (runs done, time left). They are drawn only for
a person watching: on a terminal, and never with --quiet; a log file or a pipe gets no bar."""

from __future__ import annotations

import sys
import time

LOSS_EVERY_S = 1.0  # the loss shown on the bar is read this often: reading it waits for the device


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def show_progress(quiet: bool) -> bool:
    """Whether a command draws its bars: stderr is a terminal and --quiet was not given."""
    return not quiet and stderr_is_terminal()


class TrainBar:
    """The bar of one training run, fed by `layerfuse.training.loop.train_head` (``progress=``):
    ``start(total_steps)``, ``step(loss)`` after each optimizer step (a tensor, read at most every
    `LOSS_EVERY_S` seconds), ``evaluated(scores)`` after each dev evaluation (the record of it)."""

    def __init__(self, desc: str):
        self.desc = desc
        self.bar = None
        self.loss: str | None = None
        self.dev: str | None = None
        self.read_at = 0.0

    def start(self, total_steps: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total_steps, desc=self.desc, unit="step", file=sys.stderr, dynamic_ncols=True,
                        leave=True)

    def step(self, loss) -> None:
        self.bar.update(1)
        now = time.monotonic()
        if loss is not None and now - self.read_at >= LOSS_EVERY_S:
            self.read_at = now
            self.loss = f"{float(loss):.4f}"
            self._show()

    def evaluated(self, scores: dict) -> None:
        self.dev = _headline(scores)
        self._show()

    def write(self, message: str) -> None:
        """A line above the bar (`--verbose`'s evaluations), not through it."""
        self.bar.write(message, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def _show(self) -> None:
        parts = [f"loss {self.loss}" if self.loss else None, self.dev]
        self.bar.set_postfix_str(", ".join(p for p in parts if p), refresh=False)


def _headline(scores: dict) -> str | None:
    """The last dev score of an evaluation's record, as the commands print it (F1 and accuracy in points)."""
    from ..display import f1_points

    if scores.get("dev_accuracy") is not None:
        return f"dev accuracy {f1_points(scores['dev_accuracy'])}"
    if scores.get("dev_ppl") is not None:
        return f"dev perplexity {scores['dev_ppl']:.2f}"
    if scores.get("dev_f1") is not None:
        return f"dev F1 {f1_points(scores['dev_f1'])}"
    return None
