"""Checked driver calls and the device context.

Every driver call goes through :func:`call`, which raises :class:`CudaError` naming the call,
its status (``CUDA_ERROR_…``) and the place it was made for. ``cuda.bindings`` functions
return a tuple ``(CUresult, *outputs)``; :func:`call` returns ``None``, the single output or
the tuple of outputs.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..errors import CudaError


@lru_cache(maxsize=None)
def drv() -> Any:
    """The ``cuda.bindings.driver`` module (imported on first use, never at package import)."""
    from cuda.bindings import driver
    return driver


def error_of(call_name: str, err: Any, where: str | None = None, help: str | None = None) -> CudaError:
    d = drv()
    name = getattr(err, "name", str(err))
    detail = ""
    try:
        res = d.cuGetErrorString(err)
        if res[0] == d.CUresult.CUDA_SUCCESS and res[1]:
            detail = res[1].decode(errors="replace")
    except Exception:  # the error text is a nicety; never hide the original error
        pass
    return CudaError(call_name, name, detail, where=where, help=help)


def call(name: str, *args: Any, where: str | None = None) -> Any:
    """Call driver function ``name`` and check its status."""
    d = drv()
    res = getattr(d, name)(*args)
    if isinstance(res, tuple):
        err, out = res[0], res[1:]
    else:
        err, out = res, ()
    if err != d.CUresult.CUDA_SUCCESS:
        raise error_of(name, err, where)
    if not out:
        return None
    return out[0] if len(out) == 1 else out


def probe() -> tuple[bool, str]:
    """Whether a CUDA device is usable here, and why not. Never raises."""
    try:
        d = drv()
    except Exception as e:  # cuda-bindings not installed
        return False, f"cuda.bindings unavailable: {e}"
    try:
        res = d.cuInit(0)
        err = res[0] if isinstance(res, tuple) else res
        if err != d.CUresult.CUDA_SUCCESS:
            return False, f"cuInit failed: {getattr(err, 'name', err)}"
        err, count = d.cuDeviceGetCount()
        if err != d.CUresult.CUDA_SUCCESS or count < 1:
            return False, "no CUDA device"
    except Exception as e:  # libcuda missing
        return False, f"no CUDA driver: {e}"
    return True, "ok"


def memory(ordinal: int = 0) -> tuple[int, int]:
    """(free, total) bytes of device ``ordinal`` (``cuMemGetInfo`` in its primary context,
    retained for the call only)."""
    ctx = Context(ordinal)
    try:
        free, total = call("cuMemGetInfo")
        return int(free), int(total)
    finally:
        ctx.release()


class Context:
    """The device's primary context, made current on the calling thread (the context torch and
    cupy use too, so their pointers and ours are interchangeable)."""

    def __init__(self, ordinal: int = 0) -> None:
        d = drv()
        try:
            call("cuInit", 0)
        except Exception as e:
            if isinstance(e, CudaError):
                raise
            raise CudaError("cuInit", "NO_DRIVER", str(e),
                            help="kern-runtime needs an NVIDIA GPU and its driver") from None
        count = call("cuDeviceGetCount")
        if not 0 <= ordinal < count:
            raise CudaError("cuDeviceGet", "CUDA_ERROR_INVALID_DEVICE",
                            f"device {ordinal} requested, {count} present")
        self.ordinal = ordinal
        self.device = call("cuDeviceGet", ordinal)
        self.context = call("cuDevicePrimaryCtxRetain", self.device)
        self._retained = True
        call("cuCtxSetCurrent", self.context)
        A = d.CUdevice_attribute
        self.name = call("cuDeviceGetName", 256, self.device).split(b"\0")[0].decode()
        self.cc = (call("cuDeviceGetAttribute", A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device),
                   call("cuDeviceGetAttribute", A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device))
        self.max_shared_optin = call(
            "cuDeviceGetAttribute", A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, self.device)
        self.driver_version = call("cuDriverGetVersion")

    def make_current(self) -> None:
        call("cuCtxSetCurrent", self.context)

    def release(self) -> None:
        if self._retained:
            self._retained = False
            call("cuDevicePrimaryCtxRelease", self.device)

    def describe(self) -> str:
        v = self.driver_version
        return (f"device {self.ordinal}: {self.name} (sm_{self.cc[0]}{self.cc[1]}), "
                f"driver CUDA {v // 1000}.{v % 1000 // 10}")
