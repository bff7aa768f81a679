"""Mailboxes: host memory a sequence reads and writes on the GPU, so that a step's few input
values and its result cross without a copy of their own between graphs.

A :class:`Mailbox` is page-locked host memory the device addresses too
(:meth:`~kern_runtime.device.Device.mapped`). A sequence (:meth:`Runtime.run_sequence
<kern_runtime.Runtime.run_sequence>`) takes its bytes into an input with a
:class:`~kern_runtime.sequence.Load` op and puts a buffer's bytes into it with a
:class:`~kern_runtime.sequence.Store` op; both are segments of the runtime's copy kernel,
inside the sequence's graph. The host writes :meth:`Mailbox.view` before queueing the
sequence, :meth:`Mailbox.mark` s it after, and reads the stored bytes after
:meth:`Mailbox.wait`.

Why (H100, docs/measurements.md): between two decode graphs a staged copy costs ~2.5 µs of
GPU time, a batch of stream stores ~6 µs, a read back and its event ~9 µs (session 32),
while a copy-kernel node inside a graph costs ~1 µs (session 19). Measured on an H100
(session 33): a fed decode step through a mailbox adds ~3.4–4.4 µs to the replayed graph
against ~17 µs by stream operations, with bit-identical logits (kern-run's ``fed.py``).

Contract: the host writes a box only when no queued work still reads it (after its
:meth:`wait`, or before its first :meth:`mark`); a caller that keeps k steps in flight uses
k + 1 boxes in turn.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import CallerError


class Mailbox:
    """``nbytes`` of mapped host memory at ``addr`` (``array``: its bytes) and an event."""

    def __init__(self, dev: Any, stream: Any, nbytes: int) -> None:
        if nbytes < 1:
            raise CallerError(f"a mailbox needs at least one byte (got {nbytes})")
        self._pinned = dev.mapped(nbytes)
        self._event = dev.event(timing=False)
        self._stream = stream
        self.addr, self.nbytes, self.array = self._pinned.addr, nbytes, self._pinned.array
        self._marked = False

    def view(self, dtype: Any, offset: int = 0, count: int = 1) -> np.ndarray:
        """``count`` values of ``dtype`` from byte ``offset`` (a writable view)."""
        dt = np.dtype(dtype)
        if offset < 0 or offset % dt.itemsize or offset + count * dt.itemsize > self.nbytes:
            raise CallerError(f"mailbox view of {count} {dt} at byte {offset}: outside its "
                              f"{self.nbytes} bytes or misaligned")
        return self.array[offset:offset + count * dt.itemsize].view(dt)

    def mark(self) -> None:
        """Record the work queued so far; :meth:`wait` waits for it."""
        self._event.record(self._stream)
        self._marked = True

    def wait(self) -> None:
        """Wait for the work queued before the last :meth:`mark` (none: return at once)."""
        if self._marked:
            self._event.synchronize()
            self._marked = False

    def free(self) -> None:
        self._event.destroy()
        self._pinned.free()
