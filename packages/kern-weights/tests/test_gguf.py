"""``kern_weights.gguf.read_metadata``: a GGUF file's key-value metadata on a file written here
byte by byte (little-endian GGUF v3), and its refusals, each naming the file."""

from __future__ import annotations

import struct

import pytest

from kern_weights.errors import GGUFError
from kern_weights.gguf import read_metadata

U32, F32, BOOL, STRING, ARRAY, U64 = 4, 6, 7, 8, 9, 10


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, vtype: int, payload: bytes) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + payload


def _gguf(path, kvs: list[bytes], version: int = 3, magic: bytes = b"GGUF"):
    path.write_bytes(magic + struct.pack("<IQQ", version, 0, len(kvs)) + b"".join(kvs))
    return path


def test_every_value_type(tmp_path):
    p = _gguf(tmp_path / "m.gguf", [
        _kv("general.architecture", STRING, _s("llama")),
        _kv("llama.block_count", U32, struct.pack("<I", 30)),
        _kv("llama.rope.freq_base", F32, struct.pack("<f", 100000.0)),
        _kv("tokenizer.ggml.add_bos_token", BOOL, b"\x01"),
        _kv("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, 2) + _s("a") + _s("é")),
        _kv("tokenizer.ggml.token_type", ARRAY, struct.pack("<IQ", U32, 3)
            + struct.pack("<3I", 1, 2, 3)),
        _kv("general.size", U64, struct.pack("<Q", 2**40)),
    ])
    assert read_metadata(p) == {
        "general.architecture": "llama", "llama.block_count": 30,
        "llama.rope.freq_base": 100000.0, "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.tokens": ["a", "é"], "tokenizer.ggml.token_type": [1, 2, 3],
        "general.size": 2**40}


def test_refusals_name_the_file(tmp_path):
    p = tmp_path / "m.gguf"
    cases = [
        (lambda: _gguf(p, [], magic=b"GGML"), "not a GGUF file (no GGUF magic)"),
        (lambda: _gguf(p, [], version=1), "GGUF version 1 is not supported"),
        (lambda: _gguf(p, [_kv("k", STRING, struct.pack("<Q", 99) + b"ab")]),
         "truncated GGUF metadata"),
        (lambda: _gguf(p, [_kv("k", 42, b"")]), "unknown GGUF value type 42"),
    ]
    for make, msg in cases:
        make()
        with pytest.raises(GGUFError) as e:
            read_metadata(p)
        assert str(e.value).startswith(f"GGUF `{p}`: {msg}"), str(e.value)
    with pytest.raises(GGUFError, match="cannot read"):
        read_metadata(tmp_path / "missing.gguf")
