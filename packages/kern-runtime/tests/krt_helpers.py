"""Test helpers shared by the CPU tests, the GPU tests and the benchmark (a uniquely named
module, so it cannot collide with other packages' test helpers on sys.path)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

_NP_TO_ST = {"<u2": "BF16", "<f2": "F16", "<f4": "F32", "<i4": "I32", "<u4": "U32",
             "<i8": "I64", "|u1": "U8"}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], bytes]],
                      metadata: dict[str, str] | None = None) -> Path:
    """A safetensors file from (safetensors dtype, shape, raw bytes) per name."""
    header: dict = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    blobs = []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
    return path


def st_tensor(array: np.ndarray, dtype: str | None = None) -> tuple[str, tuple[int, ...], bytes]:
    """(dtype, shape, bytes) of a numpy array; bf16 passed as uint16 bits with dtype='BF16'."""
    a = np.ascontiguousarray(array)
    return (dtype or _NP_TO_ST[a.dtype.str], tuple(a.shape), a.tobytes())
