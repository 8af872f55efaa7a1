"""The one range of a seed: numpy's and torch's generators take 0..2^32-1, so every seed a user gives
(`--seed`, `--seeds`, `--mask-seed`, a server job's ``mask_seed``, `TrainConfig.seed`) is checked
against `SEED_LIMIT`, before a generator fails on it in a traceback."""

from numbers import Integral

SEED_LIMIT = 2**32


def is_seed(value) -> bool:
    """Whether ``value`` is an integer seed (numpy's too; a bool is none) in 0..SEED_LIMIT-1."""
    return isinstance(value, Integral) and not isinstance(value, bool) and 0 <= value < SEED_LIMIT
