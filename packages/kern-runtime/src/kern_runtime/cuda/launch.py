"""Prepared kernel launches: the argument block and its ``void**`` array are built once;
:meth:`KernelLaunch.run` is one ``cuLaunchKernel`` call with a pre-built argument tuple."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..launchplan import BoundKernel
from .driver import drv, error_of


class KernelLaunch:
    __slots__ = ("_fn", "_args", "_data", "_ptrs", "_ok", "where", "bound")

    def __init__(self, func: Any, bound: BoundKernel, stream: int) -> None:
        d = drv()
        blk = bound.args
        # Own copy of the packed bytes (numpy buffers are at least 16-byte aligned) and
        # the pointer array kernelParams[i] = &data[offset_i]; both live as long as the launch.
        self._data = np.frombuffer(bytes(blk.data) or b"\0" * 8, dtype=np.uint8).copy()
        base = self._data.ctypes.data
        self._ptrs = np.array([base + o for o in blk.offsets] or [0], dtype=np.uint64)
        params = self._ptrs.ctypes.data if blk.offsets else 0
        gx, gy, gz = bound.grid
        bx, by, bz = bound.block
        self._fn = d.cuLaunchKernel
        self._args = (func, gx, gy, gz, bx, by, bz, bound.shared_mem, stream, params, 0)
        self._ok = d.CUresult.CUDA_SUCCESS
        self.where = bound.template.where
        self.bound = bound

    def run(self) -> None:
        err = self._fn(*self._args)[0]
        if err != self._ok:
            raise error_of("cuLaunchKernel", err, self.where)
