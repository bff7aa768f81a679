"""Hostile weight files (issue 17): mutated safetensors and GGUF headers reach the readers;
the only exception that may escape is kern's own (:class:`kern_manifest.KernError`, which the
CLIs print as one line). ``KERN_FUZZ_CASES`` (default 150) sets the cases per reader; the
documented long run is ``KERN_FUZZ_CASES=20000 uv run --frozen pytest -q
packages/kern-weights/tests/test_fuzz_headers.py``."""

from __future__ import annotations

import json
import os
import struct

from hypothesis import HealthCheck, given, settings, strategies as st
from kern_manifest import KernError

from kern_weights.gguf import read_metadata
from kern_weights.stfile import read_header

CASES = int(os.environ.get("KERN_FUZZ_CASES", "150"))
FUZZ = settings(max_examples=CASES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


def _safetensors() -> bytes:
    hdr = {"__metadata__": {"format": "pt"},
           "a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
           "b": {"dtype": "F32", "shape": [4], "data_offsets": [12, 28]}}
    h = json.dumps(hdr).encode()
    return struct.pack("<Q", len(h)) + h + bytes(28)


def _gguf() -> bytes:
    """A small GGUF v3: two metadata entries (a string, an u32 array) and one f32 tensor."""
    def s(x: str) -> bytes:
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    kv = s("general.architecture") + struct.pack("<I", 8) + s("llama")
    kv += s("llama.dims") + struct.pack("<I", 9) + struct.pack("<IQ", 4, 3) + struct.pack("<3I", 1, 2, 3)
    ti = s("w") + struct.pack("<I", 1) + struct.pack("<Q", 4) + struct.pack("<I", 0) + struct.pack("<Q", 0)
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 2) + kv + ti
    head += bytes((-len(head)) % 32)
    return head + bytes(16)


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    b = bytearray(data)
    for pos, val in edits:
        b[pos % len(b)] = val
    return bytes(b[:cut]) if cut is not None else bytes(b)


EDITS = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8)
CUT = st.none() | st.integers(0, 400)


def _only_kern_errors(fn, path) -> None:
    try:
        fn(path)
    except KernError:
        pass


@FUZZ
@given(edits=EDITS, cut=CUT)
def test_safetensors_header_reader_raises_only_kern_errors(tmp_path_factory, edits, cut):
    p = tmp_path_factory.mktemp("st") / "w.safetensors"
    p.write_bytes(_mutate(_safetensors(), edits, cut))
    _only_kern_errors(read_header, p)


@FUZZ
@given(edits=EDITS, cut=CUT)
def test_gguf_metadata_reader_raises_only_kern_errors(tmp_path_factory, edits, cut):
    p = tmp_path_factory.mktemp("gg") / "m.gguf"
    p.write_bytes(_mutate(_gguf(), edits, cut))
    _only_kern_errors(read_metadata, p)


def test_the_unmutated_files_read():
    """The seeds are valid, so the mutations start from files the readers accept."""
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        st_p, gg_p = Path(d) / "w.safetensors", Path(d) / "m.gguf"
        st_p.write_bytes(_safetensors())
        gg_p.write_bytes(_gguf())
        assert set(read_header(st_p)) == {"a", "b"}
        m = read_metadata(gg_p)
        assert m["general.architecture"] == "llama" and list(m["llama.dims"]) == [1, 2, 3]
