"""Property tests: mutating valid manifests at random never makes decode or verify raise
anything but a DecodeError; every manifest that decodes round-trips through encode; an f32
literal of any float value round-trips exactly when finite and is refused, naming its place,
when not (JSON has no infinity or NaN: decode refuses the text, encode the struct)."""

from __future__ import annotations

import copy
import json

import math

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kern_manifest import (Arg, DecodeError, Diagnostic, EncodeError, StepArg, decode, encode,
                           verify)
from kern_manifest.codes import CODES

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BASES = [json.loads((ROOT / "examples" / "toy" / "manifest.json").read_text())]

# Values a mutation may plant anywhere: the shapes of everything the format holds, valid or
# not, inf and NaN included (json.dumps writes them as the non-JSON `Infinity`/`NaN`).
STRINGS = st.one_of(
    st.sampled_from(["tokens", "h", "x", "cache", "norm", "energy", "part", "bf16", "f32",
                     "in buffer<bf16>", "inout ptr", "buffer<bf16>", "i32", "u8", "workspace",
                     "output", "extern:cublaslt_bf16_tn", "0" * 64]),
    st.text(max_size=6),
)
LEAVES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(), st.booleans(), st.none(),
    STRINGS,
)
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["sym", "mul", "ceil_div", "buf", "offset", "arg", "i32",
                                     "f32", "scratch", "max", "min", "dtype", "shape", "class"]),
                    inner, max_size=2)), max_leaves=6)


def _slots(doc, path=()):
    """Every (container, key) position in the document."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield doc, k
            yield from _slots(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield doc, i
            yield from _slots(v, path + (i,))


@st.composite
def mutated(draw):
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        slots = list(_slots(doc))
        if not slots:  # every slot deleted by an earlier mutation
            break
        container, key = draw(st.sampled_from(slots))
        action = draw(st.sampled_from(["same-type", "same-type", "same-type", "replace",
                                       "delete", "insert"]))
        old = container[key]
        if action == "same-type":
            # Type-preserving edits get past decoding and exercise the verifier passes.
            if isinstance(old, bool):
                container[key] = not old
            elif isinstance(old, int):
                container[key] = draw(st.one_of(st.integers(-2, 70000), st.sampled_from(
                    [0, 1, 3, 255, 256, 1024, 2**31, 2**32, 2**63, 2**64])))
            elif isinstance(old, float):
                container[key] = draw(st.floats())
            elif isinstance(old, str):
                container[key] = draw(STRINGS)
            elif isinstance(old, list) and old:
                i = draw(st.integers(0, len(old) - 1))
                if draw(st.booleans()):
                    del old[i]
                else:
                    old.insert(i, copy.deepcopy(old[i]))
        elif action == "replace":
            container[key] = draw(VALUES)
        elif action == "delete":
            del container[key]
        elif isinstance(container, dict):
            container[draw(st.text(min_size=1, max_size=5))] = draw(VALUES)
        else:
            container.insert(key, draw(VALUES))
    return doc


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_verifier_never_raises_and_round_trips(doc):
    text = json.dumps(doc)
    try:
        m = decode(text)
    except DecodeError as err:
        assert err.diagnostics and all(d.code in CODES for d in err.diagnostics)
        return
    diags = verify(m)
    assert all(isinstance(d, Diagnostic) and d.code in CODES and d.path for d in diags)
    again = decode(encode(m))  # what decodes, encodes (same limits both ways)
    assert again == m
    assert verify(again) == diags


TOY = decode(json.dumps(BASES[0]))
STEP_F32 = "kernels.energy.impl.steps[1].args[2].f32"
DISP_F32 = "programs.step.dispatches[0].args[3].f32"


def _with_f32(m, step_value, disp_value):
    """The toy with an f32 literal in a step argument and in a dispatch argument."""
    energy = m.kernels["energy"]
    steps = list(energy.impl.steps)
    steps[1] = msgspec.structs.replace(
        steps[1], args=[*steps[1].args[:2], StepArg(f32=step_value)])
    kernels = {**m.kernels, "energy": msgspec.structs.replace(
        energy, impl=msgspec.structs.replace(energy.impl, steps=steps))}
    disp = m.programs["step"].dispatches
    first = msgspec.structs.replace(disp[0], args=[*disp[0].args[:3], Arg(f32=disp_value)])
    programs = {"step": msgspec.structs.replace(m.programs["step"], dispatches=[first, *disp[1:]])}
    return msgspec.structs.replace(m, kernels=kernels, programs=programs)


@settings(max_examples=300, deadline=None)
@given(st.floats(), st.floats())
def test_f32_literals_round_trip_or_are_refused_by_place(a, b):
    m = _with_f32(TOY, a, b)
    bad = {p for p, v in ((STEP_F32, a), (DISP_F32, b)) if not math.isfinite(v)}
    try:
        data = encode(m)
    except EncodeError as err:
        assert {(d.code, d.path) for d in err.diagnostics} == {("E0010", p) for p in bad}
    else:
        assert not bad
        again = decode(data)
        assert again == m  # bit-exact: -0.0, subnormals and f64 values beyond f32 included
        assert [math.copysign(1, x.f32) for x in (again.kernels["energy"].impl.steps[1].args[2],
                                                   again.programs["step"].dispatches[0].args[3])] \
            == [math.copysign(1, a), math.copysign(1, b)]
    # The same values written by another tool (Python's json writes NaN / Infinity).
    doc = msgspec.to_builtins(_with_f32(TOY, 0.5, 0.5))
    doc["kernels"]["energy"]["impl"]["steps"][1]["args"][2] = {"f32": a}
    doc["programs"]["step"]["dispatches"][0]["args"][3] = {"f32": b}
    try:
        again = decode(json.dumps(doc))
    except DecodeError as err:
        assert {(d.code, d.path) for d in err.diagnostics} == {("E0010", p) for p in bad}
    else:
        assert not bad and again == m
