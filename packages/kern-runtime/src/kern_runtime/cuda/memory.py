"""Device memory, pinned host memory, streams and events (thin checked wrappers).

Units are bytes; addresses are plain ints (``cuda.bindings`` accepts ints wherever it takes
a ``CUdeviceptr``, ``CUstream`` or host pointer).
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..errors import CudaError
from .driver import call, drv


def _align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class DeviceArena:
    """One device allocation of at least ``nbytes`` usable bytes starting at ``base``, which
    is aligned to ``align`` (a power of two; over-allocated by ``align`` when cuMemAlloc's
    own alignment might not suffice)."""

    def __init__(self, nbytes: int, align: int = 256, *, where: str | None = None) -> None:
        extra = 0 if align <= 256 else align
        self._ptr = call("cuMemAlloc", max(nbytes + extra, 1), where=where)
        raw = int(self._ptr)
        self.base = _align_up(raw, align)
        self.nbytes = nbytes

    def zero(self, stream: int) -> None:
        if self.nbytes:
            call("cuMemsetD8Async", self.base, 0, self.nbytes, stream, where="arena zero-fill")

    def free(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            call("cuMemFree", ptr)


def device_alloc(nbytes: int, *, where: str | None = None) -> int:
    return int(call("cuMemAlloc", max(nbytes, 1), where=where))


def device_free(addr: int) -> None:
    call("cuMemFree", addr)


class PinnedBuffer:
    """Page-locked host memory, exposed as a writable uint8 numpy array ``array``."""

    def __init__(self, nbytes: int, flags: int = 0, where: str = "pinned staging") -> None:
        self.nbytes = max(int(nbytes), 1)
        self.addr = int(call("cuMemHostAlloc", self.nbytes, flags, where=where))
        raw = (ctypes.c_uint8 * self.nbytes).from_address(self.addr)
        self.array = np.frombuffer(raw, dtype=np.uint8)

    def free(self) -> None:
        if self.addr:
            addr, self.addr = self.addr, 0
            self.array = None  # type: ignore[assignment]
            call("cuMemFreeHost", addr)


class MappedBuffer(PinnedBuffer):
    """Page-locked host memory the device addresses too (``CU_MEMHOSTALLOC_DEVICEMAP``):
    with unified addressing its device address is its host address, ``addr``; a kernel's
    loads and stores cross PCIe."""

    def __init__(self, nbytes: int) -> None:
        super().__init__(nbytes, int(drv().CU_MEMHOSTALLOC_DEVICEMAP), "mapped host memory")
        dev = int(call("cuMemHostGetDevicePointer", self.addr, 0, where="mapped host memory"))
        if dev != self.addr:
            host = self.addr
            self.free()
            raise CudaError("cuMemHostGetDevicePointer", "NO_UNIFIED_ADDRESSING",
                            f"device address {dev:#x} differs from host address {host:#x}",
                            help="kern-runtime's mailboxes need unified addressing (64-bit "
                                 "Linux, compute capability 2.0+)")


class Stream:
    """A non-blocking stream: it does not synchronise with the legacy default stream, and
    stream capture needs a stream other than the legacy one."""

    def __init__(self) -> None:
        flags = int(drv().CUstream_flags.CU_STREAM_NON_BLOCKING)
        self.handle = call("cuStreamCreate", flags)
        self.id = int(self.handle)

    def synchronize(self, where: str | None = None) -> None:
        call("cuStreamSynchronize", self.handle, where=where)

    def destroy(self) -> None:
        if self.handle is not None:
            h, self.handle = self.handle, None
            call("cuStreamDestroy", h)


class Event:
    def __init__(self, timing: bool = True) -> None:
        E = drv().CUevent_flags
        flags = E.CU_EVENT_DEFAULT if timing else E.CU_EVENT_DISABLE_TIMING
        self.handle = call("cuEventCreate", int(flags))

    def record(self, stream: Stream) -> None:
        call("cuEventRecord", self.handle, stream.handle)

    def synchronize(self) -> None:
        call("cuEventSynchronize", self.handle)

    def elapsed_ms(self, since: "Event") -> float:
        return float(call("cuEventElapsedTime", since.handle, self.handle))

    def destroy(self) -> None:
        if self.handle is not None:
            h, self.handle = self.handle, None
            call("cuEventDestroy", h)


def h2d(dst: int, src_host: int, nbytes: int, stream: Stream, where: str | None = None) -> None:
    call("cuMemcpyHtoDAsync", dst, src_host, nbytes, stream.handle, where=where)


def d2d(dst: int, src: int, nbytes: int, stream: Stream, where: str | None = None) -> None:
    call("cuMemcpyDtoDAsync", dst, src, nbytes, stream.handle, where=where)


def d2h(dst_host: int, src: int, nbytes: int, stream: Stream, where: str | None = None) -> None:
    call("cuMemcpyDtoHAsync", dst_host, src, nbytes, stream.handle, where=where)


class WordWrites:
    """32-bit stores queued on a stream as ONE ``cuStreamBatchMemOp``: each word a
    ``CU_STREAM_MEM_OP_WRITE_VALUE_32`` with the default flags (ordered after the stream's
    earlier work, behind a memory barrier, so the next kernel reads it). No host staging and
    no event: the values travel in the operation itself. The parameter structs are kept and
    refilled, so a call costs the driver call and two attribute stores a word."""

    #: Operations one batch takes (the driver's limit: fewer than 256).
    MAX = 255

    def __init__(self) -> None:
        self._params: list = []

    def queue(self, words: "list[tuple[int, int]] | tuple", stream: Stream,
              where: str | None = None) -> None:
        """Store ``value`` (u32) at device ``address`` (4-aligned) for each (address,
        value) in ``words`` (1…:data:`MAX` of them, in order)."""
        d = drv()
        n = len(words)
        if not 0 < n <= self.MAX:
            raise ValueError(f"{n} words in one batch (1…{self.MAX})")
        while len(self._params) < n:
            p = d.CUstreamBatchMemOpParams()
            p.writeValue.operation = d.CUstreamBatchMemOpType.CU_STREAM_MEM_OP_WRITE_VALUE_32
            p.writeValue.flags = int(d.CUstreamWriteValue_flags.CU_STREAM_WRITE_VALUE_DEFAULT)
            self._params.append(p)
        for p, (addr, value) in zip(self._params, words):
            w = p.writeValue
            w.address, w.value = addr, value
        call("cuStreamBatchMemOp", stream.handle, n, self._params[:n], 0, where=where)
