"""The one safetensors header reader (``stfile.read_header``) and how export words its
problems: absolute offsets, both dtype names, every bad entry at once."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from kern_weights import ExportError
from kern_weights.errors import HeaderError
from kern_weights.sources import HFSource, read_safetensors_header
from kern_weights.stfile import read_header


def _file(path, header: dict, data: bytes = b""):
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def test_offsets_and_dtypes_match_the_safetensors_package(tmp_path):
    from safetensors.numpy import save_file
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    b = np.array([True, False, True])
    c = np.arange(4, dtype=np.uint16)
    save_file({"a": a, "b": b, "c": c}, str(tmp_path / "x.safetensors"), metadata={"k": "v"})
    h = read_header(tmp_path / "x.safetensors")
    raw = (tmp_path / "x.safetensors").read_bytes()
    assert sorted(h) == ["a", "b", "c"]
    assert [(h[n].dtype, h[n].kern_dtype, h[n].shape) for n in "abc"] == [
        ("F64", "f64", (2, 3)), ("BOOL", None, (3,)), ("U16", None, (4,))]
    e = h["a"]
    assert np.frombuffer(raw[e.start:e.start + e.nbytes], np.float64).tolist() == a.ravel().tolist()


def test_every_bad_entry_is_listed(tmp_path):
    p = _file(tmp_path / "bad.safetensors", {
        "ok": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "short": {"dtype": "F32", "shape": [4], "data_offsets": [8, 12]},
        "what": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]},
        "junk": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]},
        "__metadata__": {"k": "v"}}, b"\0" * 16)
    with pytest.raises(HeaderError) as e:
        read_header(p)
    assert e.value.path == str(p) and e.value.message == "malformed safetensors header"
    assert e.value.problems == [
        "tensor `short`: data_offsets [8, 12] do not match F32[4] inside a "
        f"{p.stat().st_size}-byte file",
        "tensor `what`: unknown dtype 'Q4'",
        "tensor `junk`: malformed header entry {'dtype': ['F32'], 'shape': [1], "
        "'data_offsets': [0, 4]}"]


def test_file_problems_name_the_file(tmp_path):
    p = tmp_path / "x.safetensors"
    p.write_bytes(b"\x01\x02")
    with pytest.raises(HeaderError, match="shorter than a safetensors header") as e:
        read_header(p)
    assert str(e.value).startswith(f"`{p}`: ")
    p.write_bytes(struct.pack("<Q", 3) + b"[1]")
    with pytest.raises(HeaderError, match="not a JSON object"):
        read_header(p)


def test_export_words_each_problem_as_a_line(tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    f = _file(d / "m.safetensors", {
        "mask": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]},
        "idx": {"dtype": "U16", "shape": [1], "data_offsets": [2, 4]}}, b"\0" * 4)
    with pytest.raises(ExportError) as e:
        HFSource(d)
    assert e.value.problems == [
        f"`{f}`: tensor `mask` has dtype BOOL, which export does not read",
        f"`{f}`: tensor `idx` has dtype U16, which export does not read"]
    f.write_bytes(struct.pack("<Q", 10**6) + b"{}")
    with pytest.raises(ExportError) as e:
        read_safetensors_header(f)
    assert e.value.problems == [f"`{f}`: header length 1000000 does not fit the file (10 "
                                f"bytes); is it a safetensors file?"]
