"""One run: its config, its data from the cache, the few-shot sample, the loop, metrics, checkpoints."""

from .config import PAPER_LR, RunResult, TrainConfig
from .data import HeadData, load_data, load_for_run
from .loop import train_head
from .store import clear as clear_store

__all__ = ["PAPER_LR", "RunResult", "TrainConfig", "HeadData", "clear_store", "load_data", "load_for_run",
           "train_head"]
