"""Fixtures for the export tests: an independent little safetensors writer/reader (so the
exporter is not checked against itself) and a manifest factory. Shared by kern-weights' tests
and kern-gen's tests of the ``kern-gen export`` command (each conftest imports them; a
uniquely named module, so it cannot collide with other packages' test helpers on sys.path)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

ST = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
      "I32": np.dtype("<i4"), "U8": np.dtype("u1")}


def _write_st(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> Path:
    """``tensors``: name -> (safetensors dtype, array in its storage; bf16 as uint16 bits)."""
    header, blobs, off = {}, [], 0
    for name, (dt, a) in tensors.items():
        raw = np.ascontiguousarray(a, dtype=ST[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return path


def _read_st(path: Path) -> tuple[dict, dict[str, tuple[str, np.ndarray]], int]:
    """(raw header, name -> (dtype, array), data start) of a safetensors file."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        a = np.frombuffer(raw[8 + n + b:8 + n + end], dtype=ST[e["dtype"]]).reshape(e["shape"])
        out[name] = (e["dtype"], a)
    return header, out, 8 + n


def _manifest(path: Path, weights: dict[str, tuple[str, list]], extra: dict | None = None) -> Path:
    """A decodable manifest whose buffers are ``weights`` (name -> (dtype, shape)) plus
    ``extra`` buffers (export ignores non-weight buffers)."""
    bufs = {n: {"dtype": d, "shape": list(s), "class": "weight"} for n, (d, s) in weights.items()}
    bufs.update(extra or {})
    doc = {"meta": {"version": 2, "model": "test"}, "symbols": {"tokens": {"min": 1, "max": 8}},
           "buffers": bufs, "kernels": {}, "programs": {}}
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def write_st():
    return _write_st


@pytest.fixture
def read_st():
    return _read_st


@pytest.fixture
def make_manifest():
    return _manifest
