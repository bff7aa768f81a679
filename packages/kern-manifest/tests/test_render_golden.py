"""Golden output of the human and JSON renderings. Regenerate with
``uv run pytest packages/kern-manifest --update-goldens`` and review the diff."""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from kern_manifest import DecodeError, decode, render_human, render_json, verify

from kern_manifest.locate import locate

GOLDEN = Path(__file__).resolve().parent / "golden"


def _broken(toy: dict) -> dict:
    toy["buffers"]["h"]["dtype"] = "f32"
    toy["kernels"]["norm"]["impl"]["steps"][0]["block"] = [1024, 2, 1]
    toy["kernels"]["energy"]["impl"]["scratch"]["spare"] = {"dtype": "u8", "shape": [8]}
    toy["programs"]["step"]["dispatches"][1]["args"][1] = {"buf": "h"}
    return toy


def _undecodable(toy: dict) -> dict:
    toy["buffers"]["h"]["class"] = "scratchpad"
    toy["kernels"]["norm"]["params"][3] = "buffer<i32>"
    toy["kernels"]["energy"]["impl"]["steps"][1]["args"][2] = {"i32": 4, "offset": 8}
    return toy


def _render(text: str, source: str) -> tuple[str, str]:
    try:
        diags, stage = verify(decode(text)), "verify"
    except DecodeError as err:
        diags, stage = err.diagnostics, "decode"
    return render_human(diags, source, text), render_json([(source, stage, diags)])


def _limits(toy: dict) -> str:
    """One of each reader limit but nesting (which stops the reader on its own)."""
    toy["buffers"]["h"]["dtype"] = "\udfff"
    toy["kernels"]["energy"]["impl"]["steps"][1]["args"][2] = {"f32": float("nan")}
    return json.dumps(toy, indent=1).replace('"max": 256', '"max": ' + "7" * 101)


def _too_deep(toy: dict) -> str:
    deep = '{"sym": "tokens"}'
    for _ in range(40):
        deep = '{"mul": [' + deep + ", 2]}"
    return json.dumps(toy, indent=1).replace('{\n        "sym": "tokens"\n       }', deep, 1)


CASES = {
    "verify_errors": lambda toy: json.dumps(_broken(toy), indent=1),
    "decode_errors": lambda toy: json.dumps(_undecodable(toy), indent=1),
    "duplicate_key": lambda toy: json.dumps(toy, indent=1).replace(
        '"buffers": {', '"buffers": {\n  "y": {"dtype": "u8", "shape": [1], "class": "input"},', 1),
    "malformed": lambda toy: json.dumps(toy, indent=1)[:300],
    "limits": _limits,
    "too_deep": _too_deep,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case, toy, update_goldens):
    text = CASES[case](toy)
    human, machine = _render(text, f"{case}.json")
    for suffix, got in (("txt", human), ("json", machine)):
        path = GOLDEN / f"{case}.{suffix}"
        if update_goldens:
            path.write_text(got)
        assert path.exists(), f"missing golden {path.name}: run pytest --update-goldens"
        assert got == path.read_text(), f"{path.name} differs; if intended, --update-goldens"


def test_locate_points_at_values():
    text = '{"a": {"b c": [1, {"d": "x"}]},\n "e": true}'
    pos = locate(text)
    assert pos["a"] == (1, 7)
    assert pos['a["b c"][1].d'] == (1, 25)
    assert pos["e"] == (2, 7)


def test_long_lines_are_windowed(toy):
    toy["buffers"]["h"]["dtype"] = "f32"
    text = json.dumps(toy)  # one long line
    out = render_human(verify(decode(text)), "one-line.json", text)
    assert "one-line.json:1:" in out
    assert all(len(line) < 130 for line in out.splitlines())
