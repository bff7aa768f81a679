"""Shared fixtures. GPU tests are marked ``@pytest.mark.gpu`` and skip cleanly unless
``cuInit`` succeeds and a device is present (probed once per session)."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


_PROBE: tuple[bool, str] | None = None


def gpu_probe() -> tuple[bool, str]:
    """(usable, reason), probed once: cuInit succeeds and a device is present."""
    global _PROBE
    if _PROBE is None:
        from kern_runtime import gpu_available
        _PROBE = gpu_available()
    return _PROBE


def pytest_collection_modifyitems(config, items):
    # A skip marker (not a fixture) so that module-scoped GPU fixtures never run without a GPU.
    gpu_items = [it for it in items if it.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    ok, why = gpu_probe()
    if not ok:
        skip = pytest.mark.skip(reason=f"no usable GPU: {why}")
        for it in gpu_items:
            it.add_marker(skip)


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
