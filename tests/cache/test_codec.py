"""The storage codecs: one entry per format, the host and torch decodes agree, and the writer's
names (`STORAGE_DTYPES`, `DTYPE_BYTES`) come from them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layerfuse.cache.codec import CODECS, codec_of, decode_torch, first_overflow, wider_dtypes
from layerfuse.cache.writer import STORAGE_DTYPES
from layerfuse.extract.entry import DTYPE_BYTES, DTYPES


def test_one_codec_per_storage_dtype():
    assert DTYPES == ("float16", "bfloat16", "float32", "int8")
    assert STORAGE_DTYPES == {"float16": "float16", "float32": "float32", "bfloat16": "uint16", "int8": "int8"}
    assert DTYPE_BYTES == {"float16": 2, "bfloat16": 2, "float32": 4, "int8": 1}
    assert [codec_of(name).scale_bytes for name in DTYPES] == [0, 0, 0, 4]
    with pytest.raises(ValueError, match="float8"):
        codec_of("float8")


@pytest.mark.parametrize("name", list(CODECS))
def test_torch_decode_matches_the_host_decode(name):
    codec = codec_of(name)
    x = np.random.default_rng(0).standard_normal((5, 3, 16)).astype(np.float32) * 4
    values, scales = codec.encode(x)
    assert values.dtype == np.dtype(codec.stored)
    host = codec.decode(values, scales, out=np.empty(values.shape, dtype=np.float32))
    on_torch = codec.decode_torch(codec.to_torch(values), None if scales is None else torch.from_numpy(scales))
    np.testing.assert_array_equal(on_torch.numpy(), host)
    # what the device encodes is what the host encodes
    device_values, device_scales = codec.encode_torch(torch.from_numpy(x))
    np.testing.assert_array_equal(codec.to_numpy(device_values), values)
    assert (device_scales is None) == (scales is None)


def test_int8_decodes_in_float32_then_narrows():
    q = torch.tensor([[127, -127, 3]], dtype=torch.int8)
    s = torch.tensor([1000.0])
    assert decode_torch(q, s, torch.float16).dtype == torch.float16
    assert decode_torch(q, s, torch.float32).tolist() == [[127000.0, -127000.0, 3000.0]]


def test_range_check_and_wider_formats():
    assert wider_dtypes(torch.float16) == ["bfloat16", "float32"]
    assert wider_dtypes(torch.bfloat16) == ["float32"]
    assert wider_dtypes(torch.float32) == []
    assert first_overflow(torch.tensor([1.0, 7e4, 1.0]), torch.float16) == 1
    assert first_overflow(torch.tensor([1.0, 7e4]), torch.float32) is None
