"""Hostile manifests for the fuzz test (``test_fuzz.py``) and the fuzz run
(``bench/fuzz_verify.py``): real manifests, mutated.

Bases: the toy manifest, every ``examples/*/manifest.json`` and the compat Qwen3-4B fixture,
whole (rarely: each costs ~0.3 s a case) and as *slices* (one window of dispatches per
program with exactly the kernels, buffers and states it names: real names, offsets,
expressions and literals at a few ms a case). A case applies 1-4 tree mutations (replace a
value, nudge a value within its type: numbers to boundaries, strings to other names of the
document or any Unicode, a member of a container dropped or duplicated; delete or insert a
key or element, swap two elements)
(most keep the JSON type, so that they reach the verifier) and, one case in ten, one text
mutation (truncate, insert or delete bytes) after serialising.

Planted values cover what the decoder must bound: any Unicode (lone surrogates, controls,
every plane), integers from 0 to 6000 digits, non-finite and overflowing floats, nesting from
2 to 100 000 levels (lists, objects, expressions). Literals JSON cannot produce from Python
values (over-long integers, ``1e400``, deep nesting) are planted as marker strings replaced in
the text. A case is a pure function of a ``random.Random`` (:func:`make_case`): the fuzz run
iterates seeds, so every case is distinct and reproducible by its seed; the test draws the
Random from hypothesis. (Hypothesis strategies for the values themselves repeated ~40 % of
the cases and biased every position towards the first slots of a document.)

:func:`check` is the property: decoding raises nothing but ``DecodeError``, verifying returns
diagnostics, ``encode`` refuses with ``EncodeError`` or round-trips, and the CLI (human or
``--json``) exits 0/1/2, consistent with the library, without a traceback, its report valid
UTF-8 (strictly: not by the stream's error handler) or valid JSON.
"""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

import kern_manifest
from kern_manifest import CODES, DecodeError, ManifestError, decode, encode, verify
from kern_manifest.cli import app

ROOT = Path(__file__).resolve().parents[3]
REAL = sorted(ROOT.glob("examples/*/manifest.json")) + [ROOT / "tests/fixtures/compat/qwen3-4b.json"]
# Before EncodeError existed, encode raised whatever msgspec raised: the fuzz run of an older
# tree reports those as tracebacks.
ENCODE_ERROR = getattr(kern_manifest, "EncodeError", ManifestError)
_runner = CliRunner()


def _slice(doc: dict, start: int, n: int) -> dict:
    """One window of ``n`` dispatches per program, with what they name (and every symbol)."""
    progs = {p: {"dispatches": v["dispatches"][start:start + n]} for p, v in doc["programs"].items()}
    disp = [d for p in progs.values() for d in p["dispatches"]]
    kernels = {d["kernel"] for d in disp}
    args = [a for d in disp for a in d["args"]]
    bufs = {a["buf"] for a in args if "buf" in a}
    states = {a["state"] for a in args if "state" in a}
    out = {"meta": doc["meta"], "symbols": doc.get("symbols", {}),
           "states": {k: v for k, v in doc.get("states", {}).items() if k in states},
           "buffers": {k: v for k, v in doc["buffers"].items() if k in bufs},
           "kernels": {k: v for k, v in doc["kernels"].items() if k in kernels},
           "programs": progs}
    out = json.loads(json.dumps(out))  # private copy: cases mutate it in place
    # A window reads workspaces written before it: make those inputs (carries when the window
    # writes them too), so that a slice verifies clean and every diagnostic is a mutation's.
    for _ in range(3):
        diags = verify(decode(json.dumps(out)))
        for d in diags:
            if d.code in ("E0701", "E0702"):
                name = d.message.split("`")[1]
                out["buffers"][name]["class"] = "input" if d.code == "E0701" else "carry"
    return out


def _load_bases() -> list[tuple[str, dict]]:
    bases = []
    for path in REAL:
        doc = json.loads(path.read_text())
        label = path.parent.name if path.name == "manifest.json" else path.stem
        bases.append((label, doc))
        longest = max(len(p["dispatches"]) for p in doc["programs"].values())
        if longest > 40:
            for k, start in enumerate(range(0, longest, max(1, longest // 6))):
                bases.append((f"{label}[slice {k}]", _slice(doc, start, 12)))
    return bases


BASES = _load_bases()
SMALL = [i for i, (_, d) in enumerate(BASES) if len(json.dumps(d)) < 100_000]
LARGE = [i for i in range(len(BASES)) if i not in SMALL]


def _slots(doc: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) position of a document, iteratively."""
    out, stack = [], [doc]
    while stack:
        v = stack.pop()
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            out.append((v, k))
            stack.append(x)
    return out


_SLOTS = [_slots(d) for _, d in BASES]
_NAMES = [sorted({k for c, _ in s if isinstance(c, dict) for k in c} |
                 {x for c, k in s if isinstance(x := c[k], str) and len(x) < 80})
          for s in _SLOTS]

# Raw literals: a marker string in the document, replaced by the literal in the text.
_MARK = "\x00raw:{}\x00"


def _nest(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    if kind == "object":
        return '{"a": ' * depth + "1" + "}" * depth
    inner = '{"sym": "tokens"}'
    return '{"mul": [' * (depth - 1) + inner + ", 2]}" * (depth - 1)


DEPTHS = [2, 15, 16, 17, 28, 40, 60, 63, 64, 65, 66, 500, 990, 1200, 5000, 100_000]
NUMBER_TEXT = ["1e400", "-1e400", "1e308", "1e-400", "-0", "-0.0", "NaN", "Infinity",
               "-Infinity", "1E+999", "123456789012345678901234567890.5e300"]
BOUNDARY_INTS = [0, -1, 1, 3, 255, 256, 1024, 232448, 2**31 - 1, 2**31, 2**32, 2**63 - 1,
                 2**63, 2**64 - 1, 2**64, 2**70, 2**200, -(2**63) - 1]
FLOATS = [math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.7976931348623157e308, 3.4028234663852886e38,
          3.4028236e38, 1e-45, 0.5, 1e-6]
FORMAT = [
    {"sym": "tokens"}, {"mul": [{"sym": "tokens"}, 2]}, {"ceil_div": [{"sym": "tokens"}, 0]},
    {"buf": "x"}, {"state": "kv", "offset": 8}, {"i32": 1}, {"f32": 1.5}, {"u8": 256},
    {"expr": {"ceil_div": [{"sym": "tokens"}, 4]}}, {"scratch": "part", "offset": 3},
    "in buffer<bf16>", "inout ptr", "buffer<bf16>", "extern:cublaslt_bf16_tn", "0" * 64,
    {"dtype": "bf16", "shape": [1], "class": "workspace"}, {"max": 8}, {"bytes_per_token": 2**200},
]
KEYS = ["sym", "mul", "ceil_div", "buf", "offset", "arg", "f32", "max", "shape", "class"]
# Code points a name may hold: ASCII, controls, specials, lone surrogates, any plane.
_CHARS = [(0x20, 0x7E)] * 4 + [(0, 0x1F), (0xD800, 0xDFFF), (0x80, 0xFFFF), (0x10000, 0x10FFFF)]
_SPECIAL = '"\\\x7f\ufeff\u202e\u2028\ufffd'


def rand_text(rnd: random.Random) -> str:
    out = []
    for _ in range(rnd.randint(0, 8)):
        if rnd.random() < 0.1:
            out.append(rnd.choice(_SPECIAL))
        else:
            lo, hi = rnd.choice(_CHARS)
            out.append(chr(rnd.randint(lo, hi)))
    return "".join(out)


def rand_int(rnd: random.Random) -> int:
    r = rnd.random()
    if r < 0.4:
        return rnd.choice(BOUNDARY_INTS)
    if r < 0.7:
        return rnd.randint(-2, 70000)
    return rnd.choice([1, -1]) * rnd.getrandbits(rnd.randint(1, 340))


def rand_leaf(rnd: random.Random) -> Any:
    r = rnd.randrange(10)
    if r == 0:
        kind = rnd.choice(["digits", "neg", "text", "nest"])
        if kind == "digits":
            text = "9" * rnd.randint(20, 6000)
        elif kind == "neg":
            text = "-" + "1" * rnd.randint(95, 105)
        elif kind == "text":
            text = rnd.choice(NUMBER_TEXT)
        else:
            text = _nest(rnd.choice(DEPTHS), rnd.choice(["list", "object", "expr"]))
        return _MARK.format(text)
    return [lambda: rand_int(rnd), lambda: rnd.choice(FLOATS),
            lambda: rnd.uniform(-1e6, 1e6) * 10.0 ** rnd.randint(-300, 300),
            lambda: rnd.random() < 0.5, lambda: None, lambda: rand_text(rnd),
            lambda: rand_text(rnd), lambda: copy.deepcopy(rnd.choice(FORMAT)),
            lambda: rand_int(rnd)][r - 1]()


def rand_value(rnd: random.Random, depth: int = 0) -> Any:
    r = rnd.random()
    if depth >= 3 or r < 0.6:
        return rand_leaf(rnd)
    if r < 0.8:
        return [rand_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    return {(rand_text(rnd) if rnd.random() < 0.5 else rnd.choice(KEYS)): rand_value(rnd, depth + 1)
            for _ in range(rnd.randint(0, 2))}


def make_case(rnd: random.Random) -> tuple[bytes, bool]:
    """One hostile manifest file's bytes, and whether the CLI reports it as JSON. A pure
    function of ``rnd``'s state: the fuzz run names a failing case by its seed."""
    i = rnd.choice(LARGE) if LARGE and rnd.random() < 0.01 else rnd.choice(SMALL)
    doc, slots, names = BASES[i][1], _SLOTS[i], _NAMES[i]
    undo: list[tuple[Any, Any]] = []  # (container, shallow copy): restored below, in reverse
    try:
        for _ in range(rnd.choice([1, 1, 1, 2, 2, 3, 4])):
            c, k = slots[rnd.randrange(len(slots))]
            if isinstance(c, dict) and k not in c or isinstance(c, list) and k >= len(c):
                continue  # removed by an earlier mutation of this case
            undo.append((c, c.copy()))
            old = c[k]
            # Most edits keep the JSON type (nudge, swap) and so reach the verifier.
            action = rnd.choice(["value", "nudge", "nudge", "nudge", "nudge", "delete", "insert",
                                 "swap"])
            if action == "value":
                c[k] = rand_value(rnd)
            elif action == "nudge" and isinstance(old, bool):
                c[k] = not old
            elif action == "nudge" and isinstance(old, int):
                c[k] = rand_int(rnd)
            elif action == "nudge" and isinstance(old, float):
                c[k] = rnd.choice(FLOATS) if rnd.random() < 0.5 else old * rnd.choice([-1, 2, 1e300])
            elif action == "nudge" and isinstance(old, str):
                c[k] = rnd.choice(names) if rnd.random() < 0.75 else rand_text(rnd)
            elif action == "nudge" and old and isinstance(old, (dict, list)):
                undo.append((old, old.copy()))  # one member of it goes or is duplicated
                key = rnd.choice(list(old)) if isinstance(old, dict) else rnd.randrange(len(old))
                if rnd.random() < 0.5:
                    del old[key]
                elif isinstance(old, list):
                    old.insert(key, old[key])
                else:
                    old[rnd.choice(names)] = old[key]
            elif action == "delete":
                del c[k]
            elif action == "insert" and isinstance(c, dict):
                c[rand_text(rnd) if rnd.random() < 0.3 else rnd.choice(names)] = rand_value(rnd)
            elif action == "insert":
                c.insert(k, rand_value(rnd) if rnd.random() < 0.5 else old)
            elif action == "swap" and isinstance(c, list):
                j = rnd.randrange(len(c))
                c[j], c[k] = c[k], c[j]
        text = json.dumps(doc, ensure_ascii=rnd.random() < 0.5, indent=rnd.choice([None, 1]))
    finally:
        for c, saved in reversed(undo):
            if isinstance(c, dict):
                c.clear()
                c.update(saved)
            else:
                c[:] = saved
    while (a := text.find('"\\u0000raw:')) >= 0:  # each marker: one JSON string token
        b = text.index('\\u0000"', a + 1) + len('\\u0000"')
        text = text[:a] + json.loads(text[a:b])[len("\0raw:"):-1] + text[b:]
    data = text.encode("utf-8", "surrogatepass")  # raw surrogates become invalid UTF-8
    if rnd.random() < 0.1:
        at = rnd.randint(0, len(data))
        how = rnd.choice(["truncate", "insert", "delete"])
        if how == "truncate":
            data = data[:at]
        elif how == "insert":
            data = data[:at] + rnd.randbytes(rnd.randint(1, 4)) + data[at:]
        else:
            data = data[:at] + data[at + rnd.randint(1, 16):]
    return data, rnd.random() < 0.5


def check(case: tuple[bytes, bool], path: Path) -> str:
    """The fuzz property on one case (see the module docstring); returns the outcome
    (``"clean"``, ``"verify"`` or ``"decode"``). Raises on any violation. The renderings are
    checked through the CLI (human on stderr, JSON on stdout), which renders them anyway."""
    data, as_json = case
    try:
        m = decode(data)
    except DecodeError as err:
        diags, outcome = err.diagnostics, "decode"
        assert diags
    else:
        diags = verify(m)
        outcome = "verify" if diags else "clean"
        try:
            again = decode(encode(m))
        except ENCODE_ERROR:
            pass
        else:
            assert again == m
            assert verify(again) == diags
    assert all(d.code in CODES and isinstance(d.path, str) for d in diags)
    path.write_bytes(data)
    want = {"clean": 0, "verify": 1, "decode": 2}[outcome]
    args = ["verify", "--json", str(path)] if as_json else ["verify", str(path)]
    res = _runner.invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    assert res.exit_code == want, (args, res.exit_code, res.output[-2000:])
    assert "Traceback" not in res.output
    if as_json:
        assert json.loads(res.stdout)["files"][0]["ok"] == (want == 0)
    else:
        res.stderr_bytes.decode("utf-8")  # strict: the human report is valid UTF-8 itself
    return outcome
