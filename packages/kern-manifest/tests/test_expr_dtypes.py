"""Expressions, parameter types, ABI sizes and byte sizes."""

from __future__ import annotations

import pytest

from kern_manifest import (ExprError, ExprNode, ParamTypeError, abi_layout, abi_size,
                           eval_expr, format_expr, nbytes, parse_param_type)
from kern_manifest.schema import Buffer

T = ExprNode(sym="tokens")


def test_eval_forms():
    assert eval_expr(7, {}) == 7
    assert eval_expr(T, {"tokens": 5}) == 5
    assert eval_expr(ExprNode(ceil_div=(T, 4)), {"tokens": 5}) == 2
    assert eval_expr(ExprNode(ceil_div=(T, 4)), {"tokens": 8}) == 2
    assert eval_expr(ExprNode(mul=(ExprNode(ceil_div=(T, 4)), 3)), {"tokens": 9}) == 9
    assert format_expr(ExprNode(mul=(ExprNode(ceil_div=(T, 4)), 3))) == "mul(ceil_div(tokens, 4), 3)"


def test_eval_errors():
    with pytest.raises(ExprError, match="unknown symbol `tokens`"):
        eval_expr(T, {})
    with pytest.raises(ExprError, match="overflow"):
        eval_expr(ExprNode(mul=(T, 2**40)), {"tokens": 2**30})
    with pytest.raises(ExprError, match="division by zero"):
        eval_expr(ExprNode(ceil_div=(T, 0)), {"tokens": 1})


@pytest.mark.parametrize("text,size,shown", [
    ("i32", 4, "i32"), ("u32", 4, "u32"), ("i64", 8, "i64"), ("f32", 4, "f32"), ("u8", 1, "u8"),
    ("in ptr", 8, "in ptr"), (" inout buffer<fp8e4m3> ", 8, "inout buffer<fp8e4m3>"),
    ("out buffer<bf16>", 8, "out buffer<bf16>"),
])
def test_param_types(text, size, shown):
    assert abi_size(text) == size
    assert str(parse_param_type(text)) == shown


@pytest.mark.parametrize("text", ["buffer<bf16>", "ptr", "in buffer<f64>", "i16", "in  ptr",
                                  "IN ptr", "in buffer<bf16"])
def test_bad_param_types(text):
    with pytest.raises(ParamTypeError):
        parse_param_type(text)


def test_abi_layout_is_naturally_aligned():
    assert abi_layout(["u8", "i64", "i32", "u8", "in ptr"]) == [(0, 1), (8, 8), (16, 4), (20, 1), (24, 8)]


def test_nbytes():
    b = Buffer(dtype="bf16", shape=["tokens", 128], cls="workspace")
    assert nbytes(b, {"tokens": 3}) == 3 * 128 * 2
    with pytest.raises(ExprError):
        nbytes(Buffer(dtype="i64", shape=[2**61, 2], cls="workspace"), {})
