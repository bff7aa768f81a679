"""Byte sizes of buffers, scratch areas and states at given symbol values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .dtypes import DTYPE_SIZES
from .expr import U64_MAX, ExprError
from .schema import Buffer, Dim, Scratch


def shape_at(shape: Sequence[Dim], values: Mapping[str, int]) -> tuple[int, ...]:
    """Concrete shape with symbol dimensions bound by ``values``."""
    out = []
    for d in shape:
        if isinstance(d, str):
            try:
                out.append(values[d])
            except KeyError:
                raise ExprError(f"unknown symbol `{d}` in shape") from None
        else:
            out.append(d)
    return tuple(out)


def elements(shape: Sequence[Dim], values: Mapping[str, int]) -> int:
    n = 1
    for d in shape_at(shape, values):
        n *= d
    return n


def nbytes(decl: Buffer | Scratch, values: Mapping[str, int]) -> int:
    """Byte size of a buffer or scratch declaration at ``values``; raises
    :class:`ExprError` if it does not fit in 64 bits."""
    size = elements(decl.shape, values) * DTYPE_SIZES[decl.dtype]
    if size > U64_MAX:
        raise ExprError(f"byte size {size} does not fit in 64 bits")
    return size


def state_bytes(bytes_per_token: int, bytes_fixed: int, capacity: int) -> int:
    """Bytes the runtime provides for a state at ``capacity`` tokens."""
    return bytes_fixed if bytes_fixed else bytes_per_token * capacity
