"""Prepared kernel launches: the argument block and its ``void**`` array are built once;
:meth:`KernelLaunch.run` is one ``cuLaunchKernel`` call with a pre-built argument tuple, or,
for a step launched with programmatic dependent launch, one ``cuLaunchKernelEx`` with a
pre-built launch configuration carrying ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``
(the kernel may start while its predecessor on the stream still runs and waits on the grid
dependency itself; under stream capture the driver records a programmatic edge)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..launchplan import BoundKernel
from .driver import drv, error_of


class KernelLaunch:
    __slots__ = ("_fn", "_args", "_data", "_ptrs", "_ok", "_cfg", "where", "bound")

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
        self._ok = d.CUresult.CUDA_SUCCESS
        self._cfg = None
        if bound.template.pdl:
            self._cfg = _pdl_config(d, bound, stream)
            self._fn = d.cuLaunchKernelEx
            self._args = (self._cfg, func, params, 0)
        else:
            self._fn = d.cuLaunchKernel
            self._args = (func, gx, gy, gz, bx, by, bz, bound.shared_mem, stream, params, 0)
        self.where = bound.template.where
        self.bound = bound

    def run(self) -> None:
        err = self._fn(*self._args)[0]
        if err != self._ok:
            raise error_of("cuLaunchKernelEx" if self._cfg is not None else "cuLaunchKernel",
                           err, self.where)


def _pdl_config(d: Any, bound: BoundKernel, stream: int) -> Any:
    """A ``CUlaunchConfig`` of ``bound``'s geometry on ``stream`` with programmatic stream
    serialization allowed."""
    attr = d.CUlaunchAttribute()
    attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    cfg = d.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = bound.grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = bound.block
    cfg.sharedMemBytes = bound.shared_mem
    cfg.hStream = d.CUstream(stream)
    cfg.attrs = [attr]
    cfg.numAttrs = 1
    return cfg
