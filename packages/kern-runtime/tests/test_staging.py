import struct

import pytest
from kern_manifest import parse_param_type as P

from kern_runtime.staging import StagingError, build_arg_block, pack_pointer, pack_scalar


@pytest.mark.parametrize("kind,value,expected", [
    ("i32", -2, b"\xfe\xff\xff\xff"),
    ("i32", 2**31 - 1, b"\xff\xff\xff\x7f"),
    ("u32", 2**32 - 1, b"\xff\xff\xff\xff"),
    ("u32", 7, b"\x07\0\0\0"),
    ("i64", -1, b"\xff" * 8),
    ("i64", 2**40 + 3, struct.pack("<q", 2**40 + 3)),
    ("f32", 1.5, struct.pack("<f", 1.5)),
    ("f32", 3, struct.pack("<f", 3.0)),
    ("f32", 1e-6, struct.pack("<f", 1e-6)),
    ("f32", float("inf"), b"\0\0\x80\x7f"),
    ("u8", 0, b"\0"),
    ("u8", 255, b"\xff"),
])
def test_scalar_bytes(kind, value, expected):
    assert pack_scalar(kind, value) == expected


@pytest.mark.parametrize("kind,value", [
    ("i32", 2**31), ("i32", -(2**31) - 1), ("u32", -1), ("u32", 2**32), ("i64", 2**63),
    ("u8", 256), ("u8", -1), ("i32", 1.0), ("i32", True), ("f32", 1e39), ("f32", "1"),
    ("bf16", 1),
])
def test_scalar_refused(kind, value):
    with pytest.raises(StagingError):
        pack_scalar(kind, value)


def test_pointer():
    assert pack_pointer(0x7F00_0000_0100) == struct.pack("<Q", 0x7F00_0000_0100)
    with pytest.raises(StagingError):
        pack_pointer(-1)


def test_block_layout_natural_alignment():
    # u8 then i64: the i64 slot is 8-aligned; u8 after an i32; pointers 8 bytes.
    params = [P("u8"), P("i64"), P("i32"), P("u8"), P("f32"), P("in buffer<bf16>"), P("u32"),
              P("inout ptr")]
    vals = [200, -5, 7, 9, 0.25, 0x1000, 11, 0x2000]
    blk = build_arg_block(params, vals)
    assert blk.offsets == (0, 8, 16, 20, 24, 32, 40, 48)
    assert blk.sizes == (1, 8, 4, 1, 4, 8, 4, 8)
    assert len(blk.data) == 56 and len(blk.data) % 8 == 0
    assert blk.slot(0) == b"\xc8"
    assert blk.slot(1) == struct.pack("<q", -5)
    assert blk.slot(3) == b"\x09"
    assert blk.slot(4) == struct.pack("<f", 0.25)
    assert blk.slot(5) == struct.pack("<Q", 0x1000)
    assert blk.slot(7) == struct.pack("<Q", 0x2000)
    # padding is zero
    assert blk.data[1:8] == b"\0" * 7


def test_block_empty_and_mismatch():
    assert build_arg_block([], []).data == b""
    with pytest.raises(StagingError, match="2 values for 1"):
        build_arg_block([P("i32")], [1, 2])
    with pytest.raises(StagingError, match="parameter 1"):
        build_arg_block([P("i32"), P("u8")], [1, 300])
