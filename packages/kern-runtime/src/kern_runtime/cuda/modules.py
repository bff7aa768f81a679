"""Loaded cubin modules: function lookup, parameter layout and shared-memory attributes."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import errors
from ..artifacts import CubinFile
from ..errors import CudaError, KernelArtifactError
from ..launchplan import needs_shared_optin
from .driver import call, drv


class Modules:
    """Every cubin of a manifest, loaded into the current context."""

    def __init__(self, files: dict[str, CubinFile]) -> None:
        self._mods: dict[str, Any] = {}
        self._funcs: dict[tuple[str, str], Any] = {}
        self._sizes: dict[tuple[str, str], list[int] | None] = {}
        problems = []
        for name, f in files.items():
            image = np.frombuffer(f.data, dtype=np.uint8)  # kept alive across the call
            try:
                self._mods[name] = call("cuModuleLoadData", image.ctypes.data,
                                        where=errors.cubin(name))
            except CudaError as e:
                problems.append(f"{errors.cubin(name)}: the driver cannot load it ({e.code}"
                                f"{': ' + e.message if e.message else ''})")
        if problems:
            self.unload()
            raise KernelArtifactError("cubins could not be loaded", problems=problems,
                                      help="the runtime needs sm_90 cubins (nvcc -cubin -arch=sm_90)")

    def lookup(self, module: str, symbol: str) -> list[int] | None:
        """Parameter byte sizes of ``symbol`` in ``module`` (from cuFuncGetParamInfo), or None
        if the module has no such function."""
        key = (module, symbol)
        if key in self._sizes:
            return self._sizes[key]
        d = drv()
        mod = self._mods.get(module)
        if mod is None:
            self._sizes[key] = None
            return None
        err, func = d.cuModuleGetFunction(mod, symbol.encode())
        if err == d.CUresult.CUDA_ERROR_NOT_FOUND:
            self._sizes[key] = None
            return None
        if err != d.CUresult.CUDA_SUCCESS:
            from .driver import error_of
            raise error_of("cuModuleGetFunction", err, f"{errors.cubin(module)}, `{symbol}`")
        sizes: list[int] = []
        while True:
            err, _offset, size = d.cuFuncGetParamInfo(func, len(sizes))
            if err == d.CUresult.CUDA_ERROR_INVALID_VALUE:
                break  # past the last parameter
            if err != d.CUresult.CUDA_SUCCESS:
                from .driver import error_of
                raise error_of("cuFuncGetParamInfo", err, f"{errors.cubin(module)}, `{symbol}`")
            sizes.append(int(size))
            if len(sizes) > 4096:  # a driver that never says "past the end"
                raise CudaError("cuFuncGetParamInfo", "RUNAWAY", "more than 4096 parameters",
                                where=f"{errors.cubin(module)}, `{symbol}`")
        self._funcs[key] = func
        self._sizes[key] = sizes
        return sizes

    def function(self, module: str, symbol: str) -> Any:
        """The CUfunction of a symbol :meth:`lookup` found."""
        if (module, symbol) not in self._funcs:
            if self.lookup(module, symbol) is None:
                raise KeyError((module, symbol))
        return self._funcs[(module, symbol)]

    def static_shared(self, func: Any) -> int:
        A = drv().CUfunction_attribute
        return int(call("cuFuncGetAttribute", A.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func))

    def allow_dynamic_shared(self, func: Any, nbytes: int, where: str, device_limit: int) -> None:
        """Let ``func`` launch with ``nbytes`` of dynamic shared memory: its dynamic limit is
        raised where :func:`~kern_runtime.launchplan.needs_shared_optin` says so."""
        static = self.static_shared(func)
        if static + nbytes > device_limit:
            raise KernelArtifactError(
                f"needs {nbytes} B of dynamic shared memory on top of {static} B static; the "
                f"device allows {device_limit} B per block", where=where)
        if not needs_shared_optin(static, nbytes):
            return
        A = drv().CUfunction_attribute
        call("cuFuncSetAttribute", func, A.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
             int(nbytes), where=where)

    def unload(self) -> None:
        mods, self._mods = self._mods, {}
        self._funcs.clear()
        for m in mods.values():
            call("cuModuleUnload", m)
