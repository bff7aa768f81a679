"""Regression tests for every reproducer class of issue 17 (items 1-5): lone surrogates, deep
nesting, huge integers, sizes past 64 bits, non-finite f32 literals. Each input gets one
diagnostic naming the place, through the library and through the CLI (exit 2 for decode
problems, 1 for rule violations), never a traceback."""

from __future__ import annotations

import json
import math

import msgspec
import pytest
from typer.testing import CliRunner

from kern_manifest import (MAX_DEPTH, MAX_EXPR_DEPTH, MAX_INT_DIGITS, DecodeError, EncodeError,
                           ManifestError, decode, encode, from_obj, render_human, render_json,
                           state_bytes, verify)
from kern_manifest.bounded import check_tree
from kern_manifest.cli import app
from kern_manifest.codes import CODES
from kern_manifest.expr import ExprError

runner = CliRunner()
F32_ARG = "kernels.energy.impl.steps[1].args[2]"
EXPR_ARG = "programs.step.dispatches[1].args[3]"


def _decode_diags(data):
    with pytest.raises(DecodeError) as info:
        decode(data)
    return [(d.code, d.path) for d in info.value.diagnostics], info.value


def _cli(tmp_path, data: bytes | str, *extra):
    p = tmp_path / "m.json"
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    res = runner.invoke(app, ["verify", *extra, str(p)])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    return res


def _expr(depth: int) -> str:
    return '{"mul": [' * (depth - 1) + '{"sym": "tokens"}' + ", 2]}" * (depth - 1)


# --- item 1: lone surrogates -------------------------------------------------------------

def test_issue_reproducer_surrogate_dtype(toy_path, tmp_path):
    text = toy_path.read_text().replace('"dtype": "bf16", "shape": [128]',
                                        '"dtype": "\\udfff", "shape": [128]')
    assert _decode_diags(text)[0] == [("E0008", "buffers.gamma.dtype")]
    res = _cli(tmp_path, text)
    assert res.exit_code == 2
    assert "error[E0008]: string holds a lone surrogate U+DFFF" in res.output
    assert "m.json:" in res.output and "buffers.gamma.dtype" in res.output
    res = _cli(tmp_path, text, "--json")
    assert res.exit_code == 2
    (f,) = json.loads(res.stdout)["files"]
    assert f["stage"] == "decode" and f["diagnostics"][0]["code"] == "E0008"


def test_surrogates_in_keys_and_every_string_are_named(toy):
    toy["buffers"]["\udfff"] = toy["buffers"].pop("h")
    toy["programs"]["step"]["dispatches"][0]["label"] = "a\ud800b"
    diags, _ = _decode_diags(json.dumps(toy))
    assert set(diags) == {("E0008", 'buffers["\\udfff"]'),
                          ("E0008", "programs.step.dispatches[0].label")}


def test_surrogate_pairs_are_text_and_round_trip(toy):
    toy["programs"]["step"]["dispatches"][0]["label"] = "\ud83d\ude00 ok"  # one emoji
    m = decode(json.dumps(toy))  # written as \ud83d\ude00 escapes
    assert m.programs["step"].dispatches[0].label == "\U0001F600 ok"
    assert decode(encode(m)) == m


def test_raw_surrogate_bytes_are_not_utf8(toy):
    data = json.dumps(toy, ensure_ascii=False).replace('"norm"', '"n\udfffrm"', 1)
    diags, err = _decode_diags(data.encode("utf-8", "surrogatepass"))
    assert diags == [("E0001", "(top level)")]
    assert "byte 0xed at offset" in err.diagnostics[0].message and "line 1" in err.diagnostics[0].message
    # The same text handed over as str (raw surrogate characters) is found by the tree check.
    assert _decode_diags(data)[0] == [("E0008", 'kernels["n\\udfffrm"]')]


def test_renderers_and_errors_write_lone_surrogates_as_escapes():
    from kern_manifest import Diagnostic

    d = Diagnostic("E0605", "unknown buffer `\udfff`", 'buffers["\\udfff"]', help="h\ud800")
    human = render_human([d], "f\udcff.json")
    assert "`\\udfff`" in human and "f\\udcff.json" in human
    human.encode("utf-8")  # strict
    report = json.loads(render_json([("f\udcff.json", "verify", [d])]))
    assert report["files"][0]["diagnostics"][0]["message"] == "unknown buffer `\\udfff`"
    assert "\\udfff" in str(ManifestError([d], "m.json"))


def test_encode_refuses_a_surrogate_built_in_code(toy_path):
    from kern_manifest import read

    m = read(toy_path)
    bad = msgspec.structs.replace(m, meta=msgspec.structs.replace(m.meta, model="\udfff"))
    with pytest.raises(EncodeError) as info:
        encode(bad)
    assert [(d.code, d.path) for d in info.value.diagnostics] == [("E0008", "meta.model")]


# --- item 2: deep nesting ----------------------------------------------------------------

def test_issue_reproducer_100000_nested_arrays(tmp_path):
    text = "[" * 100000 + "]" * 100000
    (diag,), err = _decode_diags(text)
    assert diag == ("E0009", "[0]" * MAX_DEPTH)
    res = _cli(tmp_path, text)
    assert res.exit_code == 2 and "error[E0009]" in res.output and "m.json:1:65" in res.output


def test_deep_objects_in_the_parser_s_range_are_refused_too(toy):
    # 500 levels: the C parser reads it (fast path); the limit still applies, at its place.
    text = json.dumps(toy).replace('"label": "norm"', '"label": ' + '{"a": ' * 500 + "1" + "}" * 500)
    (diag,), _ = _decode_diags(text)
    assert diag == ("E0009", "programs.step.dispatches[0].label" + ".a" * (MAX_DEPTH - 5))


def test_issue_reproducer_expression_nested_500(toy, tmp_path):
    text = json.dumps(toy).replace('{"mul": [{"sym": "tokens"}, 128]}', _expr(500))
    (diag,), _ = _decode_diags(text)
    assert diag[0] == "E0009" and diag[1].startswith(f"{EXPR_ARG}.expr.mul[0].mul[0]")
    assert _cli(tmp_path, text).exit_code == 2


def test_expression_depth_limit_is_exact(toy):
    def with_expr(depth):
        return json.dumps(toy).replace('{"mul": [{"sym": "tokens"}, 128]}', _expr(depth))

    assert decode(with_expr(MAX_EXPR_DEPTH)).programs  # at the limit: decodes
    (diag,), err = _decode_diags(with_expr(MAX_EXPR_DEPTH + 1))
    assert diag == ("E0009", f"{EXPR_ARG}.expr")
    assert f"more than {MAX_EXPR_DEPTH} operations" in err.diagnostics[0].message


def test_json_depth_limit_is_exact():
    def codes(depth):
        with pytest.raises(DecodeError) as info:
            decode('{"meta": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}")
        return {d.code for d in info.value.diagnostics}

    assert "E0009" not in codes(MAX_DEPTH)  # a wrong type, but not too deep
    assert codes(MAX_DEPTH + 1) == {"E0009"}
    # A dict built in code, however deep, is checked without recursion.
    deep: list = []
    for _ in range(100000):
        deep = [deep]
    assert [d.code for d in check_tree(deep)] == ["E0009"]
    with pytest.raises(DecodeError):
        from_obj(deep)


def test_from_obj_bounds_tuples_built_in_code(toy):
    shape: tuple = ()
    for _ in range(5000):
        shape = (shape,)
    toy["buffers"]["h"]["shape"] = shape
    with pytest.raises(DecodeError) as info:
        from_obj(toy)
    assert [d.code for d in info.value.diagnostics] == ["E0009"]
    assert info.value.diagnostics[0].path.startswith("buffers.h.shape[0][0]")


def test_limits_are_the_documented_ones():
    text = CODES["E0009"].explanation
    assert f"{MAX_DEPTH} levels" in text and f"{MAX_EXPR_DEPTH}\noperations" in text
    assert f"more than {MAX_INT_DIGITS} digits" in CODES["E0010"].explanation


# --- item 3: huge integer literals -------------------------------------------------------

def test_issue_reproducer_5000_digit_integer(toy_path, tmp_path):
    text = toy_path.read_text().replace('"max": 256', '"max": ' + "9" * 5000)
    (diag,), err = _decode_diags(text)
    assert diag == ("E0010", "symbols.tokens.max")
    assert "has 5000 digits; at most 100 are read" in err.diagnostics[0].message
    res = _cli(tmp_path, text)
    assert res.exit_code == 2 and "error[E0010]" in res.output


def test_integer_digit_limit_is_exact(toy):
    toy["symbols"]["tokens"]["max"] = int("9" * MAX_INT_DIGITS)
    m = decode(json.dumps(toy))  # decodes; the verifier judges the value (above 2^64-1)
    assert ("E0102", "symbols.tokens.max") in {(d.code, d.path) for d in verify(m)}
    toy["symbols"]["tokens"]["max"] = -int("9" * (MAX_INT_DIGITS + 1))
    assert _decode_diags(json.dumps(toy))[0] == [("E0010", "symbols.tokens.max")]


def test_decoding_does_not_depend_on_python_s_int_limit(toy):
    import sys

    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)  # the lowest a process may set
    try:
        text = json.dumps(toy).replace('"max": 256', '"max": ' + "9" * 700)
        assert _decode_diags(text)[0] == [("E0010", "symbols.tokens.max")]
    finally:
        sys.set_int_max_str_digits(old)


# --- item 4: one size rule ---------------------------------------------------------------

@pytest.mark.parametrize("field", ["bytes_per_token", "bytes_fixed"])
def test_issue_reproducer_state_of_2_200_bytes(toy, tmp_path, field, pairs):
    toy["states"]["cache"] = {field: 2**200}
    assert pairs(toy) == {("E0105", f"states.cache.{field}")}
    res = _cli(tmp_path, json.dumps(toy))
    assert res.exit_code == 1 and "error[E0105]" in res.output and "larger than 2^64-1" in res.output


def test_sizes_at_the_64_bit_boundary(toy, pairs):
    toy["states"]["cache"] = {"bytes_fixed": 2**64 - 1}
    assert pairs(toy) == set()
    toy["states"]["cache"] = {"bytes_fixed": 2**64}
    assert pairs(toy) == {("E0105", "states.cache.bytes_fixed")}
    with pytest.raises(ExprError, match="64 bits"):
        state_bytes(2**60, 0, 2**10)  # the runtime's sizing applies the same rule
    assert state_bytes(2**53, 0, 2**10) == 2**63


@pytest.mark.parametrize("edit, expected", [
    (lambda d: d["states"]["cache"].update(align=2**64), ("E0104", "states.cache.align")),
    (lambda d: d["buffers"]["x"].update(domain={"unit": 2**64}), ("E0204", "buffers.x.domain.unit")),
    (lambda d: d["programs"]["step"]["dispatches"][1]["args"].__setitem__(
        1, {"state": "cache", "offset": 2**64}),
     ("E0608", "programs.step.dispatches[1].args[1].offset")),
    (lambda d: d["kernels"]["norm"]["impl"]["steps"][0]["grid"].__setitem__(
        1, {"ceil_div": [{"sym": "tokens"}, 2**64]}),
     ("E0301", "kernels.norm.impl.steps[0].grid[1]")),
])
def test_every_size_like_value_is_64_bit(toy, pairs, edit, expected):
    edit(toy)
    assert pairs(toy) == {expected}


def test_symbol_max_past_64_bits(toy, pairs):
    toy["symbols"]["tokens"]["max"] = 2**64
    assert ("E0102", "symbols.tokens.max") in pairs(toy)


def test_many_huge_dimensions_do_not_stall_the_verifier(toy, pairs):
    toy["buffers"]["gamma"]["shape"] = [10**99] * 2000
    assert pairs(toy) == {("E0203", "buffers.gamma")}


# --- item 5: f32 literals inf / NaN ------------------------------------------------------

@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
def test_non_finite_f32_literals_are_refused_at_decode(toy, literal):
    text = json.dumps(toy).replace('{"i32": 4}', '{"f32": %s}' % literal)
    (diag,), err = _decode_diags(text)
    assert diag == ("E0010", f"{F32_ARG}.f32")
    assert f"`{literal}`" in err.diagnostics[0].message


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_encode_refuses_non_finite_f32_built_in_code(toy_path, value):
    from kern_manifest import StepArg, read

    m = read(toy_path)
    energy = m.kernels["energy"]
    steps = list(energy.impl.steps)
    args = list(steps[1].args)
    args[2] = StepArg(f32=value)
    steps[1] = msgspec.structs.replace(steps[1], args=args)
    impl = msgspec.structs.replace(energy.impl, steps=steps)
    bad = msgspec.structs.replace(m, kernels={**m.kernels, "energy": msgspec.structs.replace(
        energy, impl=impl)})
    with pytest.raises(EncodeError) as info:
        encode(bad)
    assert [(d.code, d.path) for d in info.value.diagnostics] == [("E0010", f"{F32_ARG}.f32")]
    assert "E0409" in {d.code for d in verify(bad)}  # and it never verifies
