"""Property tests: mutating valid manifests at random never makes decode or verify raise
anything but a DecodeError, and every manifest that decodes round-trips through encode."""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kern_manifest import DecodeError, Diagnostic, decode, encode, verify
from kern_manifest.codes import CODES

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BASES = [json.loads((ROOT / "examples" / "toy" / "manifest.json").read_text())]

# Values a mutation may plant anywhere: the shapes of everything the format holds, valid or not.
LEAVES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=False),
    st.booleans(), st.none(),
    st.sampled_from(["tokens", "h", "x", "cache", "norm", "energy", "part", "bf16", "f32",
                     "in buffer<bf16>", "inout ptr", "buffer<bf16>", "i32", "u8", "workspace",
                     "output", "extern:cublaslt_bf16_tn", "0" * 64]),
    st.text(max_size=6),
)
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["sym", "mul", "ceil_div", "buf", "offset", "arg", "i32",
                                     "scratch", "max", "min", "dtype", "shape", "class"]),
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
            elif isinstance(old, str):
                container[key] = draw(LEAVES.filter(lambda v: isinstance(v, str)))
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
    again = decode(encode(m))
    assert again == m
    assert verify(again) == diags
