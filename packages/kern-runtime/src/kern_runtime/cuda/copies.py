"""The runtime's own copy kernel (``copies.cu``, its PTX beside it, JIT-compiled by the
driver on first use): several small device copies of a sequence in one launch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .driver import call, drv, error_of

#: Segments one launch copies (``copies.cu``'s ``Segs``).
MAX_SEGMENTS = 8
SYMBOL = "kern_rt_copies"
_BLOCK = 256


class CopyKernel:
    """``kern_rt_copies`` loaded into the current context (once, on the first group)."""

    def __init__(self) -> None:
        ptx = (Path(__file__).with_name("copies.ptx").read_bytes() + b"\0")
        self._image = np.frombuffer(ptx, dtype=np.uint8)     # alive across the load
        self.module = call("cuModuleLoadData", self._image.ctypes.data,
                           where="kern-runtime's copy kernel (copies.ptx)")
        self.func = call("cuModuleGetFunction", self.module, SYMBOL.encode(),
                         where="kern-runtime's copy kernel")

    def unload(self) -> None:
        if self.module is not None:
            m, self.module = self.module, None
            call("cuModuleUnload", m)


def pack(segments: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """``Segs`` as bytes: dst[8], src[8] (u64), bytes[8] (u32), count (i32), padded to 168."""
    if not 1 <= len(segments) <= MAX_SEGMENTS:
        raise ValueError(f"{len(segments)} segments; one launch copies 1 … {MAX_SEGMENTS}")
    out = np.zeros(168, np.uint8)
    dst, src, n = (np.zeros(MAX_SEGMENTS, t) for t in (np.uint64, np.uint64, np.uint32))
    for i, (d, s, b) in enumerate(segments):
        dst[i], src[i], n[i] = d, s, b
    out[0:64] = dst.view(np.uint8)
    out[64:128] = src.view(np.uint8)
    out[128:160] = n.view(np.uint8)
    out[160:164] = np.array([len(segments)], np.int32).view(np.uint8)
    return out


class CopiesLaunch:
    """One prepared launch of the copy kernel over ``segments`` (dst, src, bytes) on
    ``stream``, with programmatic stream serialization (the kernel waits on the grid
    dependency itself)."""

    def __init__(self, kernel: CopyKernel, segments: Sequence[tuple[int, int, int]],
                 stream: int, where: str) -> None:
        d = drv()
        self._data = pack(segments)
        self._ptrs = np.array([self._data.ctypes.data], dtype=np.uint64)
        largest = max(b for _, _, b in segments)
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        cfg = d.CUlaunchConfig()
        cfg.gridDimX = max(1, min(64, -(-largest // (4 * _BLOCK))))
        cfg.gridDimY = cfg.gridDimZ = 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = _BLOCK, 1, 1
        cfg.sharedMemBytes = 0
        cfg.hStream = d.CUstream(stream)
        cfg.attrs = [attr]
        cfg.numAttrs = 1
        self._cfg = cfg
        self._args = (cfg, kernel.func, self._ptrs.ctypes.data, 0)
        self._ok = d.CUresult.CUDA_SUCCESS
        self.where = where

    def run(self) -> None:
        err = drv().cuLaunchKernelEx(*self._args)[0]
        if err != self._ok:
            raise error_of("cuLaunchKernelEx", err, self.where)
