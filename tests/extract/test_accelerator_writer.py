"""`extract` on an accelerator other than CUDA (MPS): each unit reaches the writer thread in host memory,
where its ``numpy()`` can read it. Before, only CUDA units were copied to the host, and an MPS run
failed on its first unit.

No Mac here: a ``meta`` tensor stands in for the device's unit. It holds no data, so its copy to the
host is stood in for by zeros of its shape and dtype (a torch function mode), while its ``numpy()``
in the writer thread (where no mode is active) fails as an MPS tensor's does."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from layerfuse.cache.codec import codec_of
from layerfuse.extract.job import BackgroundWriter


class MetaCopiesToZeros(TorchFunctionMode):
    """A host copy of a meta tensor (``.cpu()``, ``.to("cpu")``, ``host.copy_(t)``) gives zeros."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        try:
            return func(*args, **(kwargs or {}))
        except NotImplementedError as exc:  # "Cannot copy out of meta tensor; no data!"
            if "meta" not in str(exc):
                raise
            if func is torch.Tensor.copy_:
                return args[0].zero_()
            return torch.zeros(args[0].shape, dtype=args[0].dtype)


def test_the_stand_in_cannot_be_read_without_a_host_copy():
    with pytest.raises(TypeError, match="meta"):
        torch.zeros(2, device="meta").numpy()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8"])
def test_a_unit_computed_on_another_accelerator_is_copied_to_the_host(dtype):
    written = []
    stub = SimpleNamespace(codec=codec_of(dtype),
                           write_unit=lambda unit, values, **scales: written.append((unit, values, scales)))
    unit = torch.zeros(5, 3, 8, dtype=torch.bfloat16 if dtype == "bfloat16" else torch.float16, device="meta")
    with MetaCopiesToZeros(), BackgroundWriter(stub) as background:
        background.put(0, unit, torch.device("meta"))
    [(index, values, scales)] = written
    assert index == 0 and isinstance(values, np.ndarray) and values.shape == (5, 3, 8)
    if dtype == "int8":  # quantised on the device: values and scales both crossed
        assert values.dtype == np.int8 and isinstance(scales["scales"], np.ndarray)
