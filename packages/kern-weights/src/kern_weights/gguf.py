"""A GGUF file's key-value metadata, read without its tensor index (fast: the tokenizer of a
GGUF needs ~100k strings, which ``gguf.GGUFReader`` takes seconds to parse together with
everything else). Little-endian GGUF v2/v3 only. The one GGUF metadata reader: kern-run's
tokenizer and the GGUF weight source (:mod:`.gguf_source`) both read metadata here; needs
no ``gguf`` package."""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np

from .errors import GGUFError

_NUM = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1",
        10: "<u8", 11: "<i8", 12: "<f8"}
_STRING, _ARRAY, _BOOL = 8, 9, 7


class _Cursor:
    def __init__(self, data: memoryview, where: str) -> None:
        self.data, self.pos, self.where = data, 0, where

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise GGUFError(f"{self.where}: truncated GGUF metadata")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def string(self) -> str:
        return bytes(self.take(self.u64())).decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.u32(), self.u64()
            if etype in _NUM:
                dt = np.dtype(_NUM[etype])
                arr = np.frombuffer(self.take(dt.itemsize * count), dtype=dt)
                return [bool(x) for x in arr] if etype == _BOOL else arr.tolist()
            return [self.value(etype) for _ in range(count)]
        if vtype in _NUM:
            dt = np.dtype(_NUM[vtype])
            v = np.frombuffer(self.take(dt.itemsize), dtype=dt)[0].item()
            return bool(v) if vtype == _BOOL else v
        raise GGUFError(f"{self.where}: unknown GGUF value type {vtype}")


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """Every key-value pair of the GGUF file ``path`` (arrays as Python lists)."""
    where = f"GGUF `{path}`"
    try:
        with open(path, "rb") as f:
            import mmap
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as err:
        raise GGUFError(f"{where}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    view = memoryview(mm)
    try:
        cur = _Cursor(view, where)
        if bytes(cur.take(4)) != b"GGUF":
            raise GGUFError(f"{where}: not a GGUF file (no GGUF magic)")
        version = cur.u32()
        if version not in (2, 3):
            raise GGUFError(f"{where}: GGUF version {version} is not supported (2 or 3, "
                               f"little-endian)")
        cur.u64()  # tensor count
        count = cur.u64()
        meta: dict[str, Any] = {}
        for _ in range(count):
            key = cur.string()
            meta[key] = cur.value(cur.u32())
        return meta
    finally:
        cur = None  # drop every view of the map before closing it
        view.release()
        try:
            mm.close()
        except BufferError:  # a slice still referenced somewhere; the GC closes it
            pass
