"""Host arrays for ``Runtime.write`` / ``Runtime.read`` (pure numpy; no GPU).

numpy has no bf16 or fp8 type, so those buffers travel as raw bits: ``read`` returns
``uint16`` for bf16 and ``uint8`` for fp8e4m3, and ``write`` accepts those (or ml_dtypes'
``bfloat16`` / ``float8_e4m3fn`` when the caller has them). :func:`to_bf16` and
:func:`from_bf16` convert between float32 and bf16 bits (round to nearest even).

A write may be a prefix: its elements are written from the start of the buffer (row-major,
so a prefix of rows), as long as they fit the buffer at its symbol maxima.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from kern_manifest import Buffer, shape_at

from .errors import CallerError

#: Host dtype ``read`` returns for each manifest dtype.
HOST_DTYPES: dict[str, np.dtype] = {
    "bf16": np.dtype("<u2"), "f16": np.dtype("<f2"), "f32": np.dtype("<f4"),
    "fp8e4m3": np.dtype("u1"), "i32": np.dtype("<i4"), "u32": np.dtype("<u4"),
    "i64": np.dtype("<i8"), "u8": np.dtype("u1"),
}

#: Further host dtype names ``write`` accepts (same element size, raw bits or the real type).
_ALSO_ACCEPTED: dict[str, tuple[str, ...]] = {
    "bf16": ("int16", "bfloat16"),
    "fp8e4m3": ("int8", "float8_e4m3fn"),
}


def host_view(name: str, buf: Buffer, array: object, max_values: Mapping[str, int]) -> np.ndarray:
    """Check ``array`` against buffer ``name`` and return it as a C-contiguous 1-D byte view.

    Refuses (with :class:`CallerError`) a dtype other than the buffer's (no silent casts:
    float64 for an f32 buffer is refused), and more elements than the buffer holds at the
    symbol maxima. If ``array`` has the buffer's rank, every constant dimension must match.
    """
    if not isinstance(array, np.ndarray):
        raise CallerError(f"write needs a numpy array, got {type(array).__name__}",
                          where=f"buffer `{name}`")
    want = HOST_DTYPES[buf.dtype]
    ok = array.dtype == want or (array.dtype.itemsize == want.itemsize
                                 and array.dtype.name in _ALSO_ACCEPTED.get(buf.dtype, ()))
    if not ok:
        raise CallerError(f"array dtype {array.dtype} does not match the buffer's {buf.dtype}",
                          where=f"buffer `{name}`",
                          help=f"pass {want} (bf16 and fp8 travel as raw bits; see to_bf16)")
    cap_shape = shape_at(buf.shape, max_values)
    if array.ndim == len(buf.shape):
        for i, (d, have) in enumerate(zip(buf.shape, array.shape)):
            if isinstance(d, int) and have != d:
                raise CallerError(f"array shape {list(array.shape)} differs from the buffer's "
                                  f"{list(buf.shape)} in dimension {i}", where=f"buffer `{name}`")
    cap = math.prod(cap_shape)  # exact, and ~50x cheaper than np.prod on a short tuple
    if array.size > cap:
        raise CallerError(f"{array.size} elements do not fit: the buffer holds {cap} "
                          f"({buf.dtype}{list(cap_shape)} at the symbol maxima)",
                          where=f"buffer `{name}`")
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 (or anything castable) -> bf16 bits as uint16, round to nearest even; NaN
    stays NaN."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded = np.where(nan, np.uint16(0x7FC0), rounded)
    return rounded.reshape(f.shape)


def from_bf16(bits: np.ndarray) -> np.ndarray:
    """bf16 bits (uint16) -> float32, exactly."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32).reshape(b.shape)
