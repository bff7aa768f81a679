"""``arrays``: the one dtype table and bf16 conversion of kern (kern-runtime's ``to_bf16`` /
``from_bf16`` and host dtypes are these)."""

from __future__ import annotations

import numpy as np
import pytest

from kern_manifest import DTYPE_SIZES
from kern_weights.arrays import (BF16_NAN, FROM_ST, SIZES, ST_NAMES, ST_SIZES, STORAGE,
                                 bf16_to_f32, f32_to_bf16, from_bf16, to_bf16)


def _f32(*bits: int) -> np.ndarray:
    return np.array(bits, dtype=np.uint32).view(np.float32)


def test_every_nan_becomes_the_one_quiet_nan():
    # quiet, negative, signalling, all-ones payloads: torch's `.to(bfloat16)` gives 0x7FC0
    nans = _f32(0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0xFF800001)
    assert f32_to_bf16(nans).tolist() == [BF16_NAN] * 6 and BF16_NAN == 0x7FC0
    assert np.isnan(bf16_to_f32(np.array([BF16_NAN, 0xFFC1], np.uint16))).all()


def test_infinities_and_rounding_edges():
    x = _f32(0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x3F808000, 0x3F818000, 0x00000001)
    # +inf, -inf, max finite rounds up to inf, ties to even (down, then up), a denormal
    assert f32_to_bf16(x).tolist() == [0x7F80, 0xFF80, 0x7F80, 0x3F80, 0x3F82, 0x0000]


def test_shapes_and_inputs_are_kept():
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    bits = f32_to_bf16(x)
    assert bits.dtype == np.uint16 and bits.shape == (2, 3)
    assert bf16_to_f32(bits).tolist() == x.tolist()
    assert bf16_to_f32(bits.T).tolist() == x.T.tolist()  # non-contiguous input
    assert to_bf16 is f32_to_bf16 and from_bf16 is bf16_to_f32


def test_sizes_are_the_manifest_sizes():
    assert set(ST_NAMES) == set(DTYPE_SIZES)
    for d, n in DTYPE_SIZES.items():
        assert SIZES[d] == STORAGE[d].itemsize == ST_SIZES[ST_NAMES[d]] == n, d
        assert FROM_ST[ST_NAMES[d]] == d
    assert set(FROM_ST) - set(ST_NAMES.values()) == {"F64"} and SIZES["f64"] == 8


@pytest.mark.parametrize("dtype", sorted(DTYPE_SIZES))
def test_storage_round_trips_bytes(dtype):
    raw = bytes(range(16))
    a = np.frombuffer(raw, dtype=STORAGE[dtype])
    assert a.size == 16 // DTYPE_SIZES[dtype] and a.tobytes() == raw
