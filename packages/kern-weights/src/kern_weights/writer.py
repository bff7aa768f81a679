"""An incremental safetensors writer: the header first (all offsets computed from the
declared shapes), then each tensor's bytes in order, so only one tensor is in memory.

Format: ``u64-le N | N bytes of JSON header | data``; the header maps each name to
``{"dtype", "shape", "data_offsets": [begin, end]}`` (relative to the data section,
contiguous, no gaps) plus ``__metadata__`` (string -> string). The header is padded with
spaces to a multiple of 8 bytes so the data section is 8-byte aligned, as the reference
implementation does. The file is written to ``OUT.partial`` and renamed on success.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import numpy as np

from .arrays import SIZES, ST_NAMES, STORAGE
from .errors import ExportError


@dataclass(frozen=True, slots=True)
class Slot:
    name: str
    dtype: str  # kern dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = SIZES[self.dtype]
        for d in self.shape:
            n *= d
        return n


def header_bytes(slots: Sequence[Slot], metadata: Mapping[str, str] | None = None) -> bytes:
    doc: dict[str, object] = {}
    if metadata:
        doc["__metadata__"] = dict(metadata)
    off = 0
    for s in slots:
        doc[s.name] = {"dtype": ST_NAMES[s.dtype], "shape": list(s.shape),
                       "data_offsets": [off, off + s.nbytes]}
        off += s.nbytes
    raw = json.dumps(doc, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


class SafetensorsWriter:
    """``with SafetensorsWriter(path, slots) as w: w.write(name, array) ...`` — tensors in
    slot order; the file appears under ``path`` only if every slot was written."""

    def __init__(self, path: str | os.PathLike, slots: Sequence[Slot],
                 metadata: Mapping[str, str] | None = None) -> None:
        names = [s.name for s in slots]
        if len(set(names)) != len(names):
            raise ValueError("duplicate tensor names")
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".partial")
        self.slots = list(slots)
        self.total = sum(s.nbytes for s in self.slots)
        self._next = 0
        try:
            self._f = open(self.tmp, "wb")
            self._f.write(header_bytes(self.slots, metadata))
        except OSError as err:
            raise ExportError(f"`{self.path}`: cannot write: {err.strerror or err}") from None

    def write(self, name: str, data: np.ndarray) -> None:
        if self._next >= len(self.slots):
            raise ValueError(f"`{name}`: all slots are written")
        s = self.slots[self._next]
        if name != s.name:
            raise ValueError(f"expected `{s.name}` next, got `{name}`")
        if data.dtype != STORAGE[s.dtype] or tuple(data.shape) != s.shape:
            raise ValueError(f"`{name}`: {data.dtype}{list(data.shape)} does not fill "
                             f"slot {s.dtype}{list(s.shape)}")
        buf = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        try:
            self._f.write(buf)
        except OSError as err:
            raise ExportError(f"`{self.path}`: cannot write: {err.strerror or err}") from None
        self._next += 1

    def __enter__(self) -> SafetensorsWriter:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._f.close()
        except OSError:
            pass
        if et is None and self._next != len(self.slots):
            self.tmp.unlink(missing_ok=True)
            raise ValueError(f"only {self._next} of {len(self.slots)} tensors written")
        if et is not None:
            self.tmp.unlink(missing_ok=True)
            return
        try:
            os.replace(self.tmp, self.path)
        except OSError as err:
            self.tmp.unlink(missing_ok=True)
            raise ExportError(f"`{self.path}`: cannot write: {err.strerror or err}") from None
