"""``kern-run bench --lever``: parsing (refusals name the option's text) and the count of
PDL launch boundaries read from a real manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kern_run.bench.levers import parse_levers, pdl_steps
from kern_run.errors import KernRunError

ROOT = Path(__file__).resolve().parents[3]
SMOL = ROOT / "examples" / "smollm2-135m"


def test_levers_parse_by_case_in_order():
    got = parse_levers([f"smollm2:a={SMOL}", f"qwen3:b={SMOL}", f"smollm2:c={SMOL}"])
    assert got == {"smollm2": [("a", SMOL), ("c", SMOL)], "qwen3": [("b", SMOL)]}


@pytest.mark.parametrize("spec, msg", [
    ("llama:a=x", "CASE:LABEL=DIR"), ("smollm2:=x", "CASE:LABEL=DIR"),
    ("smollm2:a=", "CASE:LABEL=DIR"), ("smollm2:a=/nonexistent", "has no manifest.json")])
def test_a_bad_lever_is_refused_by_its_text(spec, msg):
    with pytest.raises(KernRunError, match=msg) as e:
        parse_levers([spec])
    assert spec in str(e.value)


def test_pdl_steps_counts_the_decode_steps_marked_pdl():
    m = json.loads((SMOL / "manifest.json").read_bytes())
    want = sum(1 for d in m["programs"]["decode"]["dispatches"]
               for s in m["kernels"][d["kernel"]]["impl"]["steps"] if s.get("pdl"))
    assert pdl_steps(SMOL / "manifest.json") == want > 0


def test_generation_set_up_of_the_lever_rows_and_the_ablation():
    """The 16-token id prompt inside the vocabulary, the capacity capped at LEVER_CAPACITY
    (or the model's position limit), none for a fixed-context manifest.  (A recursion here
    failed every lever row and ablation on the GPU in session 21's review commit.)"""
    from types import SimpleNamespace

    from kern_run.bench.levers import LEVER_CAPACITY, generation

    prompt, cap, fixed = generation(SimpleNamespace(vocab=50, context=None, position_limit=8192))
    assert prompt == [(17 * i + 5) % 50 for i in range(16)] and max(prompt) < 50
    assert (cap, fixed) == (LEVER_CAPACITY, False)
    assert generation(SimpleNamespace(vocab=50, context=None, position_limit=1000))[1] == 1000
    assert generation(SimpleNamespace(vocab=50, context=128, position_limit=None))[1:] == \
        (None, True)
