"""Byte sizes of buffers, scratch areas and states at given symbol values, and the one size
rule: every size, count, offset, alignment and symbol bound of a manifest is an unsigned
64-bit value (:func:`fits_u64`). The verifier applies it with the code of each place (E0102
symbol bounds, E0104 alignment, E0105 state sizes, E0203 buffer and scratch sizes, E0204
domain units, E0301 expression values, E0608 offsets); the runtime gets :class:`ExprError`
from :func:`nbytes` and :func:`state_bytes` for a size past it."""

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


def fits_u64(n: int) -> bool:
    """The size rule: ``n`` is an unsigned 64-bit value."""
    return 0 <= n <= U64_MAX


def elements(shape: Sequence[Dim], values: Mapping[str, int]) -> int:
    n = 1
    for d in shape_at(shape, values):
        n *= d
    return n


def nbytes(decl: Buffer | Scratch, values: Mapping[str, int]) -> int:
    """Byte size of a buffer or scratch declaration at ``values``; raises
    :class:`ExprError` if it does not fit in 64 bits."""
    size = DTYPE_SIZES[decl.dtype]
    for d in shape_at(decl.shape, values):
        size *= d
        if not fits_u64(size):  # stop early: the product of many huge dims is costly
            raise ExprError("byte size does not fit in 64 bits")
    return size


def state_bytes(bytes_per_token: int, bytes_fixed: int, capacity: int) -> int:
    """Bytes the runtime provides for a state at ``capacity`` tokens; raises
    :class:`ExprError` if that does not fit in 64 bits."""
    size = bytes_fixed if bytes_fixed else bytes_per_token * capacity
    if not fits_u64(size):
        raise ExprError(f"state size at capacity {capacity} does not fit in 64 bits")
    return size
