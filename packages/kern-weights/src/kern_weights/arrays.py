"""Element types and conversions, numpy only (no torch): the one home of kern's dtype tables
and of its bf16 conversion (kern-runtime's ``to_bf16``/``from_bf16`` are these functions).

bf16 has no numpy dtype: a bf16 array is carried as ``uint16`` bit patterns, tagged by an
:class:`Array`. f32 -> bf16 rounds to nearest, ties to even, exactly as torch's
``.to(bfloat16)`` does, NaN included: every NaN becomes the quiet NaN ``0x7FC0`` (sign and
payload dropped); infinities stay infinite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ExportError

#: kern manifest dtype -> safetensors dtype name.
ST_NAMES: dict[str, str] = {
    "bf16": "BF16", "f16": "F16", "f32": "F32", "fp8e4m3": "F8_E4M3",
    "i32": "I32", "u32": "U32", "i64": "I64", "u8": "U8",
}
#: safetensors dtype name -> kern dtype (source side; F64 is accepted as a float source).
FROM_ST: dict[str, str] = {v: k for k, v in ST_NAMES.items()} | {"F64": "f64"}
#: Element size of every safetensors dtype, including those kern has no name for.
ST_SIZES: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}

#: numpy storage of each dtype (bf16 as its bit pattern, fp8 as raw bytes); for the manifest
#: dtypes also the host arrays kern-runtime's ``read`` returns and ``write`` takes.
STORAGE: dict[str, np.dtype] = {
    "bf16": np.dtype("<u2"), "f16": np.dtype("<f2"), "f32": np.dtype("<f4"),
    "f64": np.dtype("<f8"), "fp8e4m3": np.dtype("u1"), "i32": np.dtype("<i4"),
    "u32": np.dtype("<u4"), "i64": np.dtype("<i8"), "u8": np.dtype("u1"),
}
SIZES: dict[str, int] = {k: v.itemsize for k, v in STORAGE.items()}

#: The bf16 bits of every NaN (torch's choice: positive, quiet, no payload).
BF16_NAN = 0x7FC0

FLOATS = frozenset({"bf16", "f16", "f32", "f64"})


@dataclass(frozen=True, slots=True)
class Array:
    """A tensor's values: ``data`` in the numpy storage of ``dtype`` (see :data:`STORAGE`)."""

    data: np.ndarray
    dtype: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


def can_convert(src: str, dst: str) -> bool:
    """Whether values of ``src`` can be written as ``dst``: identical dtypes always; among
    floats any direction (f64 only as a source); nothing else."""
    if src == dst:
        return True
    return src in FLOATS and dst in FLOATS and dst != "f64"


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16, or anything castable) -> float32, exactly; same shape."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 (or anything castable) -> bf16 bit patterns (uint16), round to nearest even;
    every NaN -> :data:`BF16_NAN`; same shape."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32)
    lsb = (u >> np.uint32(16)) & np.uint32(1)
    r = u + (np.uint32(0x7FFF) + lsb)  # wraps only for NaN bit patterns, replaced below
    out = (r >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        out[nan] = BF16_NAN
    return out


#: kern-runtime's names for the same two conversions.
to_bf16 = f32_to_bf16
from_bf16 = bf16_to_f32


#: Elements converted at a time: bounds the temporaries of a conversion to a few MiB.
CHUNK = 1 << 20


def convert(a: Array, dst: str, what: str) -> np.ndarray:
    """``a`` in the storage of ``dst`` (a new array unless the dtypes are equal)."""
    if a.dtype == dst:
        return a.data.astype(STORAGE[dst], copy=False)
    out = np.empty(a.shape, dtype=STORAGE[dst])
    convert_into(a, out, dst, what)
    return out


def convert_into(a: Array, out: np.ndarray, dst: str, what: str) -> None:
    """Write ``a`` converted to ``dst`` into ``out`` (same shape, storage of ``dst``),
    :data:`CHUNK` elements at a time. ``what`` names the tensor in errors. A finite value
    that does not fit the target (overflows to infinity) is an error, not a silent inf.
    f64 sources go to bf16 through f32 (two roundings; no checkpoint we know stores f64)."""
    if not can_convert(a.dtype, dst):
        raise ExportError(f"{what}: cannot convert {a.dtype} to {dst}")
    if out.shape != a.shape or out.dtype != STORAGE[dst]:
        raise ValueError(f"{what}: output {out.dtype}{list(out.shape)} does not fit "
                         f"{dst}{list(a.shape)}")
    if not out.flags.c_contiguous:
        raise ValueError(f"{what}: convert_into needs a contiguous output")
    x, y = a.data.reshape(-1), out.reshape(-1)
    if a.dtype == dst:
        y[:] = x
        return
    for i in range(0, x.size, CHUNK):
        y[i:i + CHUNK] = _convert_flat(x[i:i + CHUNK], a.dtype, dst, what, i)


def _convert_flat(x: np.ndarray, src: str, dst: str, what: str, base: int) -> np.ndarray:
    """One chunk: ``x`` (1-d, storage of ``src``) -> storage of ``dst``."""
    f = bf16_to_f32(x) if src == "bf16" else x
    with np.errstate(over="ignore"):
        if dst == "f16":
            out = back = f.astype(np.float16)
        elif dst == "f32":
            out = back = f.astype(np.float32)
        else:  # bf16
            out = f32_to_bf16(f.astype(np.float32, copy=False))
            back = bf16_to_f32(out)
    if src in ("f32", "f64") or dst == "f16":
        bad = np.isfinite(f) & ~np.isfinite(back)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ExportError(f"{what}: value {float(f[i])!r} at flat index {base + i} "
                              f"overflows {dst}")
    return out
