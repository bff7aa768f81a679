"""The CUDA backend: :class:`kern_runtime.device.Device` over the modules of this package.

Each method returns the object of the module that implements the operation (a
:class:`~.memory.Stream`, :class:`~.launch.KernelLaunch`, :class:`~.graphs.Graph`, ...), so the
driver calls, their order and their stream semantics are those modules'; this class adds no
driver call of its own. cuBLASLt is loaded on the first :meth:`CudaDevice.gemm` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..artifacts import CubinFile
from ..launchplan import BoundKernel
from . import graphs, memory
from .driver import Context
from .launch import KernelLaunch
from .modules import Modules


class CudaDevice:
    """GPU ``ordinal``: its primary context, retained and made current on this thread."""

    def __init__(self, ordinal: int) -> None:
        self._ctx = Context(ordinal)
        self.max_shared_optin = self._ctx.max_shared_optin
        self._copy_kernel = None      # copies.CopyKernel, loaded on the first copies()
        self._words = memory.WordWrites()

    def describe(self) -> str:
        return self._ctx.describe()

    def stream(self) -> memory.Stream:
        return memory.Stream()

    def arena(self, nbytes: int, align: int, where: str) -> memory.DeviceArena:
        return memory.DeviceArena(nbytes, align, where=where)

    def modules(self, cubins: dict[str, CubinFile]) -> Modules:
        return Modules(cubins)

    def kernel(self, func: Any, bound: BoundKernel, stream: memory.Stream) -> KernelLaunch:
        return KernelLaunch(func, bound, stream.id)

    def gemm(self, stream: memory.Stream) -> Any:
        from .cublaslt import CublasLt
        return CublasLt(stream)

    def capture(self, stream: memory.Stream, steps: Sequence[Any], where: str) -> graphs.Graph:
        return graphs.capture(stream, steps, where)

    def pinned(self, nbytes: int) -> memory.PinnedBuffer:
        return memory.PinnedBuffer(nbytes)

    def mapped(self, nbytes: int) -> memory.MappedBuffer:
        return memory.MappedBuffer(nbytes)

    def event(self, timing: bool = True) -> memory.Event:
        return memory.Event(timing=timing)

    # the copies are the module functions themselves (no extra frame per write or read)
    h2d = staticmethod(memory.h2d)
    d2h = staticmethod(memory.d2h)
    d2d = staticmethod(memory.d2d)

    def write_words(self, words: Sequence[tuple[int, int]], stream: memory.Stream,
                    where: str | None = None) -> None:
        self._words.queue(words, stream, where)

    def copies(self, segments: Sequence[tuple[int, int, int]], stream: memory.Stream,
               where: str) -> Any:
        from .copies import CopiesLaunch, CopyKernel
        if self._copy_kernel is None:         # loaded once, outside any capture
            self._copy_kernel = CopyKernel()
        return CopiesLaunch(self._copy_kernel, segments, stream.id, where)

    def release(self) -> None:
        if self._copy_kernel is not None:
            k, self._copy_kernel = self._copy_kernel, None
            k.unload()
        self._ctx.release()
