"""Launch-argument bytes: every parameter is one little-endian slot.

A step's arguments are packed once into one contiguous block; slot ``i`` sits at the
naturally aligned offset :func:`kern_manifest.abi_layout` gives for the step's declared
``params`` (the layout ``cuFuncGetParamInfo`` reports for a C kernel). The driver reads
``kernelParams[i]`` as a pointer to slot ``i`` and copies ``size_i`` bytes from it, so only
the slot *sizes* must agree with the function; the offsets in our block are our own choice.

Slot encodings (x86-64 and the GPU are both little-endian):

| type       | size | encoding                              |
|------------|------|---------------------------------------|
| buffer/ptr | 8    | unsigned 64-bit device address        |
| i64        | 8    | two's complement 64-bit               |
| i32        | 4    | two's complement 32-bit               |
| u32        | 4    | unsigned 32-bit                       |
| f32        | 4    | IEEE 754 binary32 (rounded to nearest)|
| u8         | 1    | unsigned 8-bit                        |
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from kern_manifest import INT_RANGES, ParamType, abi_layout

_FORMATS = {"i32": "<i", "u32": "<I", "i64": "<q", "f32": "<f", "u8": "<B"}
_U64_MAX = 2**64 - 1


class StagingError(ValueError):
    """A value that does not fit its slot; the caller adds the place."""


def pack_scalar(kind: str, value: int | float) -> bytes:
    """Little-endian bytes of ``value`` as scalar type ``kind`` (i32, u32, i64, f32, u8).

    Integers must be Python ints inside the type's range; f32 accepts ints and floats and
    refuses finite values that would round to infinity (NaN and ±inf are passed through).
    """
    fmt = _FORMATS.get(kind)
    if fmt is None:
        raise StagingError(f"unknown scalar type `{kind}`")
    if kind == "f32":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise StagingError(f"f32 slot needs a number, got {type(value).__name__}")
        try:
            # struct rounds to nearest and raises for finite values that round to inf.
            return struct.pack(fmt, float(value))
        except OverflowError:
            raise StagingError(f"{value} overflows f32") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise StagingError(f"{kind} slot needs an integer, got {type(value).__name__}")
    lo, hi = INT_RANGES[kind]
    if not lo <= value <= hi:
        raise StagingError(f"{value} is outside the {kind} range [{lo}, {hi}]")
    return struct.pack(fmt, value)


def pack_pointer(address: int) -> bytes:
    """8-byte little-endian device address."""
    if not 0 <= address <= _U64_MAX:
        raise StagingError(f"address {address:#x} is not an unsigned 64-bit value")
    return struct.pack("<Q", address)


def pack_slot(param: ParamType, value: int | float) -> bytes:
    """Bytes of one slot: a device address for buffers/pointers, else the scalar."""
    if param.is_memory:
        return pack_pointer(int(value))
    return pack_scalar(param.scalar, value)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class ArgBlock:
    """One launch's packed arguments: ``data[offsets[i] : offsets[i] + sizes[i]]`` is slot i."""

    data: bytes
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]

    def slot(self, i: int) -> bytes:
        return self.data[self.offsets[i]:self.offsets[i] + self.sizes[i]]


def build_arg_block(params: Sequence[ParamType], values: Sequence[int | float]) -> ArgBlock:
    """Pack ``values`` (addresses for memory params, scalars otherwise) into one block laid
    out per :func:`abi_layout`. The block's length is rounded up to 8 bytes so that the
    copy the backend makes of it stays 8-byte aligned."""
    if len(params) != len(values):
        raise StagingError(f"{len(values)} values for {len(params)} parameters")
    layout = abi_layout([str(p) for p in params])
    end = layout[-1][0] + layout[-1][1] if layout else 0
    buf = bytearray((end + 7) // 8 * 8)
    for i, (p, v, (off, size)) in enumerate(zip(params, values, layout)):
        try:
            slot = pack_slot(p, v)
        except StagingError as err:
            raise StagingError(f"parameter {i} ({p}): {err}") from None
        assert len(slot) == size
        buf[off:off + size] = slot
    return ArgBlock(bytes(buf), tuple(o for o, _ in layout), tuple(s for _, s in layout))
