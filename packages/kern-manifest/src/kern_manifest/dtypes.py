"""Element types and kernel parameter types: the vocabulary the format types things with.

A parameter type string (``"in buffer<bf16>"``, ``"inout ptr"``, ``"i32"``) is parsed once
into a :class:`ParamType`; ``abi_size`` is the byte size of its launch-argument slot, which
the runtime compares with the loaded function's layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

DType = Literal["bf16", "f16", "f32", "fp8e4m3", "i32", "u32", "i64", "u8"]

#: Element size in bytes of every buffer dtype.
DTYPE_SIZES: dict[str, int] = {
    "bf16": 2,
    "f16": 2,
    "f32": 4,
    "fp8e4m3": 1,
    "i32": 4,
    "u32": 4,
    "i64": 8,
    "u8": 1,
}

ScalarKind = Literal["i32", "u32", "i64", "f32", "u8"]

#: Byte size of each scalar parameter slot.
SCALAR_SIZES: dict[str, int] = {"i32": 4, "u32": 4, "i64": 8, "f32": 4, "u8": 1}

#: Inclusive value range of each integer scalar type.
INT_RANGES: dict[str, tuple[int, int]] = {
    "i32": (-(2**31), 2**31 - 1),
    "u32": (0, 2**32 - 1),
    "i64": (-(2**63), 2**63 - 1),
    "u8": (0, 255),
}

#: Largest finite float32 magnitude.
F32_MAX = 3.4028234663852886e38

POINTER_SIZE = 8

_PARAM_RE = re.compile(
    r"^\s*(?:(?P<scalar>i32|u32|i64|f32|u8)"
    r"|(?P<dir>in|out|inout) (?:(?P<ptr>ptr)|buffer<(?P<dtype>[a-z0-9]+)>))\s*$"
)


@dataclass(frozen=True, slots=True)
class ParamType:
    """A parsed parameter type.

    ``kind`` is ``"scalar"``, ``"buffer"`` or ``"ptr"``. Scalars carry ``scalar`` (their
    type name) and no direction; buffers carry ``dtype``; buffers and pointers carry
    ``direction``.
    """

    kind: Literal["scalar", "buffer", "ptr"]
    scalar: str | None = None
    dtype: str | None = None
    direction: Literal["in", "out", "inout"] | None = None

    @property
    def reads(self) -> bool:
        return self.direction in ("in", "inout")

    @property
    def writes(self) -> bool:
        return self.direction in ("out", "inout")

    @property
    def is_memory(self) -> bool:
        return self.kind != "scalar"

    @property
    def abi_size(self) -> int:
        """Bytes of this parameter's launch-argument slot."""
        return POINTER_SIZE if self.is_memory else SCALAR_SIZES[self.scalar]  # type: ignore[index]

    def same_shape(self, other: "ParamType") -> bool:
        """Same kind and element type, ignoring direction."""
        return (self.kind, self.scalar, self.dtype) == (other.kind, other.scalar, other.dtype)

    def __str__(self) -> str:
        if self.kind == "scalar":
            return str(self.scalar)
        body = "ptr" if self.kind == "ptr" else f"buffer<{self.dtype}>"
        return f"{self.direction} {body}"


class ParamTypeError(ValueError):
    """A parameter type string that is not in the format's grammar."""


@lru_cache(maxsize=None)
def parse_param_type(text: str) -> ParamType:
    """Parse a parameter type string; raise :class:`ParamTypeError` with the reason."""
    m = _PARAM_RE.match(text)
    if m is None:
        stripped = text.strip()
        if stripped.startswith(("buffer<", "ptr")):
            raise ParamTypeError(
                f"invalid parameter type {text!r}: pointers and buffers need a direction "
                f"(`in`, `out` or `inout`), e.g. \"in {stripped}\""
            )
        raise ParamTypeError(
            f"invalid parameter type {text!r}: expected i32, u32, i64, f32, u8, "
            f"or `in|out|inout ptr` / `in|out|inout buffer<DTYPE>`"
        )
    if m["scalar"]:
        return ParamType("scalar", scalar=m["scalar"])
    direction = m["dir"]
    if m["ptr"]:
        return ParamType("ptr", direction=direction)
    dtype = m["dtype"]
    if dtype not in DTYPE_SIZES:
        raise ParamTypeError(
            f"invalid parameter type {text!r}: unknown dtype {dtype!r} "
            f"(one of {', '.join(DTYPE_SIZES)})"
        )
    return ParamType("buffer", dtype=dtype, direction=direction)


def abi_size(text: str) -> int:
    """Launch-argument slot size in bytes of a parameter type string."""
    return parse_param_type(text).abi_size


def abi_layout(params: list[str] | tuple[str, ...]) -> list[tuple[int, int]]:
    """Naturally aligned ``(offset, size)`` of each parameter in a launch-argument block,
    the layout ``cuFuncGetParamInfo`` reports for a C kernel taking these parameters."""
    out: list[tuple[int, int]] = []
    offset = 0
    for p in params:
        size = abi_size(p)
        offset = (offset + size - 1) // size * size
        out.append((offset, size))
        offset += size
    return out
