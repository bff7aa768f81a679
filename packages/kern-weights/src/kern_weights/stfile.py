"""The one safetensors header reader: tensor names, dtypes, shapes and absolute byte ranges of
a file, from its header alone (no tensor data read).

Format: ``u64-le N | N bytes of JSON header | data``; the header maps each tensor name to
``{"dtype", "shape", "data_offsets": [begin, end]}`` (relative to the data section) plus an
optional ``__metadata__`` entry (string -> string). The header is parsed here rather than
through ``safetensors.safe_open`` because callers need the absolute file offsets: the
runtime streams byte ranges from the file straight into pinned staging memory, and export
reads bf16 tensors (which numpy cannot name) as raw bytes.

Every safetensors dtype is read (its element size checks the byte range); an entry keeps the
safetensors name and the kern dtype, ``None`` where kern has none (``BOOL``, ``I8``, ...).
Problems of the file as a whole stop the reader at once; bad entries are all collected into
one :class:`~kern_weights.errors.HeaderError`.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass

from .arrays import FROM_ST, ST_SIZES
from .errors import HeaderError

MAX_HEADER = 100 * 2**20  # the format's own limit


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One tensor in a safetensors file. ``start`` is the absolute file offset of its data,
    ``dtype`` the safetensors dtype name (e.g. ``"BF16"``)."""

    file: str
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    nbytes: int

    @property
    def kern_dtype(self) -> str | None:
        """The kern dtype of the tensor (``"bf16"``; ``"f64"`` as a source dtype), or None."""
        return FROM_ST.get(self.dtype)


def read_header(path: str | os.PathLike) -> dict[str, TensorEntry]:
    """The tensor entries of the safetensors file ``path``, in header order; raises
    :class:`HeaderError` if the file is unreadable, its header malformed, or any entry bad
    (every bad entry listed)."""
    p = str(path)
    try:
        size = os.path.getsize(p)
        with open(p, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise HeaderError(p, "file is shorter than a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER or 8 + n > size:
                raise HeaderError(p, f"header length {n} does not fit the file ({size} bytes)",
                                  help="is it a safetensors file?")
            raw = f.read(n)
    except OSError as err:
        raise HeaderError(p, f"cannot read: {err.strerror or err}") from None
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise HeaderError(p, f"header is not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise HeaderError(p, "header is not a JSON object")
    out: dict[str, TensorEntry] = {}
    problems: list[str] = []
    for name, info in doc.items():
        if name == "__metadata__":
            continue
        entry = _entry(p, name, info, 8 + n, size, problems)
        if entry is not None:
            out[name] = entry
    if problems:
        raise HeaderError(p, "malformed safetensors header", problems=problems)
    return out


def _entry(p: str, name: str, info: object, data_start: int, size: int,
           problems: list[str]) -> TensorEntry | None:
    """The entry of tensor ``name``, or None after appending its problem to ``problems``."""
    try:
        dtype = info["dtype"]  # type: ignore[index]
        shape = tuple(int(d) for d in info["shape"])  # type: ignore[index]
        begin, end = (int(x) for x in info["data_offsets"])  # type: ignore[index]
        if not isinstance(dtype, str):
            raise TypeError(dtype)
    except (KeyError, TypeError, ValueError):
        problems.append(f"tensor `{name}`: malformed header entry {info!r}")
        return None
    esize = ST_SIZES.get(dtype)
    if esize is None:
        problems.append(f"tensor `{name}`: unknown dtype {dtype!r}")
        return None
    if not 0 <= begin <= end or data_start + end > size or end - begin != math.prod(shape) * esize:
        problems.append(f"tensor `{name}`: data_offsets [{begin}, {end}] do not match "
                        f"{dtype}{list(shape)} inside a {size}-byte file")
        return None
    return TensorEntry(p, name, dtype, shape, data_start + begin, end - begin)
