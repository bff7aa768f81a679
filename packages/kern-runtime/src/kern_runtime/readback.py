"""Queued device-to-host reads: a read that does not wait for the stream.

:meth:`Runtime.read_async <kern_runtime.Runtime.read_async>` queues a copy into one of a
buffer's pinned staging slots and records an event behind it; :meth:`PendingRead.wait` waits
for that event only (not for work queued later) and returns a fresh host array. A caller that
feeds a step's output back on the device can so keep the next steps queued while it waits for
an earlier result (decode: the GPU never idles on the host's token read).

Contract: each buffer has ``depth`` slots used in turn; queueing into a slot whose previous
read was never waited materialises that read first (waits for its event, copies it out), so
every :class:`PendingRead` stays valid for as long as it is kept. The device is reached only
through ``dev`` (:class:`~kern_runtime.device.Device`: pinned buffers, events, device-to-host
copies).
"""

from __future__ import annotations

import numpy as np

from .device import Device, Stream
from .errors import CallerError

#: Slots per buffer: one read in flight while the caller holds the previous one.
DEPTH = 2


class PendingRead:
    """One queued read; :meth:`wait` returns its array (the same one on every call)."""

    def __init__(self, slot: "_Slot", shape: tuple[int, ...], dtype: np.dtype, nbytes: int,
                 where: str) -> None:
        self._slot: _Slot | None = slot
        self._shape = shape
        self._dtype = dtype
        self._nbytes = nbytes
        self._where = where
        self._out: np.ndarray | None = None

    def wait(self) -> np.ndarray:
        if self._out is None:
            slot, self._slot = self._slot, None
            if slot is None:
                raise CallerError(f"{self._where}: the runtime was closed before this read "
                                  f"was waited for")
            out = np.empty(self._shape, dtype=self._dtype)
            if self._nbytes:
                slot.event.synchronize()
                out.reshape(-1).view(np.uint8)[:] = slot.pinned.array[:self._nbytes]
            slot.owner = None
            self._out = out
        return self._out

    @property
    def waited(self) -> bool:
        return self._out is not None


class _Slot:
    def __init__(self, dev: Device, nbytes: int) -> None:
        self.pinned = dev.pinned(nbytes)
        self.event = dev.event(timing=False)
        self.owner: PendingRead | None = None


class ReadRing:
    """The pinned slots of one buffer (``nbytes`` each), used round-robin."""

    def __init__(self, dev: Device, nbytes: int, depth: int = DEPTH) -> None:
        self._dev = dev
        self.nbytes = nbytes
        self._slots: list[_Slot] = []
        try:
            for _ in range(depth):
                self._slots.append(_Slot(dev, nbytes))
        except BaseException:
            self.free()
            raise
        self._next = 0

    def queue(self, src: int, shape: tuple[int, ...], dtype: np.dtype, nbytes: int,
              stream: Stream, where: str) -> PendingRead:
        """Queue a copy of ``nbytes`` (≤ the slot size) from device address ``src`` on
        ``stream``; the result has ``shape`` and ``dtype``."""
        if nbytes > self.nbytes:
            raise ValueError(f"{where}: {nbytes} bytes do not fit a {self.nbytes}-byte slot")
        slot = self._slots[self._next]
        self._next = (self._next + 1) % len(self._slots)
        if slot.owner is not None:
            slot.owner.wait()   # keep the earlier result: copy it out before reuse
        p = PendingRead(slot, shape, dtype, nbytes, where)
        if nbytes:
            self._dev.d2h(slot.pinned.addr, src, nbytes, stream, where=where)
            slot.event.record(stream)
        slot.owner = p
        return p

    def free(self) -> None:
        """Release the slots; reads never waited become unusable (their wait fails)."""
        first: BaseException | None = None
        for s in self._slots:
            if s.owner is not None:
                s.owner._slot = None
            s.owner = None
            for fn in (s.pinned.free, s.event.destroy):
                try:
                    fn()
                except BaseException as e:  # keep releasing; report the first failure
                    first = first or e
        self._slots.clear()
        if first is not None:
            raise first
