"""``Runtime.write_scalars``: single i32/i64 input values as one queued store operation.

A fed decode step's positions (``positions``, ``slots``, ``kv_lens``: three values) used to
be three staged copies, each with its event. Measured on an H100 (session 32,
``packages/kern-run/device_feed.py``): 7.60 µs a step between two decode graphs as copies,
6.15 µs as one batch of stream stores.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from kern_manifest import INT_RANGES

from .errors import CallerError, CudaError
from .hostdata import HOST_DTYPES

#: 32-bit words of each buffer dtype :meth:`ScalarWrites.write_scalars` takes.
SCALAR_WORDS = {"i32": 1, "i64": 2}
#: 32-bit words one call queues at most (one batch of the driver's).
MAX_WORDS = 255


class ScalarWrites:
    """:class:`~kern_runtime.Runtime`'s ``write_scalars`` (it uses the runtime's buffer
    checks, addresses, device and stream, and ``stream_writes``)."""

    def write_scalars(self, values: Mapping[str, int]) -> None:
        """Set the first element of each named input or carry buffer (dtype i32 or i64) to
        its value, ordered like :meth:`write`: the same as ``write(name, [value])`` for each,
        as ONE queued operation of 32-bit stores (:meth:`Device.write_words`; an i64 is its
        two little-endian words) without staging buffers or events. A decode step's
        positions are three such values. Every value is checked before anything is queued.
        ``stream_writes = False`` (an attribute; device_feed.py's A/B) writes them with
        :meth:`write` instead."""
        words: list[tuple[int, int]] = []
        for (name, value), (dtype, addr, nw) in zip(values.items(), self._scalar_targets(values)):
            lo, hi = INT_RANGES[dtype]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not lo <= int(value) <= hi:
                raise CallerError(f"{value!r} is not an {dtype} value ({lo}…{hi})",
                                  where=f"buffer `{name}`")
            v = int(value)
            words += [(addr + 4 * i, (v >> 32 * i) & 0xFFFFFFFF) for i in range(nw)]
        if not words:
            return
        if len(words) > MAX_WORDS:
            raise CallerError(f"write_scalars: {len(words)} words in one operation, at most "
                              f"{MAX_WORDS}", help="split the values over several calls")
        if not self.stream_writes:
            for (name, value), (dtype, _, _) in zip(values.items(), self._scalar_targets(values)):
                self.write(name, np.array([value], HOST_DTYPES[dtype]))
            return
        try:
            self._dev.write_words(words, self._stream, where="write_scalars "
                                  + ", ".join(f"`{n}`" for n in values))
        except CudaError as e:
            if e.code != "CUDA_ERROR_NOT_SUPPORTED":
                raise
            self.stream_writes = False    # no stream memory operations here: copies, as before
            self.write_scalars(values)

    def _scalar_targets(self, values: Mapping[str, int]) -> list[tuple[str, int, int]]:
        """(dtype, address, 32-bit words) of each named buffer, checked on the first call
        with these names and kept: a decode step's call repeats the same three."""
        self._check_open()
        cache = self.__dict__.setdefault("_scalar_cache", {})
        names = tuple(values)
        hit = cache.get(names)
        if hit is None:
            hit = []
            for name in names:
                b = self._writable(name, f"buffer `{name}`")
                if b.dtype not in SCALAR_WORDS:
                    raise CallerError(f"write_scalars takes i32 and i64 buffers, not {b.dtype}",
                                      where=f"buffer `{name}`", help="use write")
                hit.append((b.dtype, self.addresses.buffers[name], SCALAR_WORDS[b.dtype]))
            cache[names] = hit
        return hit
