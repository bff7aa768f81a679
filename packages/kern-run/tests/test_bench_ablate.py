"""``kern-run bench --ablate``: the classes of a real decode step, and the manifests without
each class (they verify, keep every other dispatch as it was, and reclassify exactly the
buffers whose writer was left out)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kern_manifest import from_obj, parse_param_type, read, verify

from kern_run.bench.ablate import (ATTENTION, CAPTURED, CLASSES, GEMM, NORM, OTHER, ROPE,
                                   class_counts, kernel_class, without)
from kern_run.errors import KernRunError

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ["smollm2-135m", "qwen3-4b", "smollm2-135m-dspark"]
NORMS = {"smollm2-135m": NORM, "qwen3-4b": NORM, "smollm2-135m-dspark": CAPTURED}
"""The class of each example's decode RMSNorms (kern-gen's ``--own-norm`` default by model,
on for both models since session 30; never in a DSpark manifest, whose decode keeps the
captured norms)."""
CONFIG = {"smollm2-135m-dspark": "smollm2-135m"}
"""An example without its own config.json: the one whose model it extends."""
PRESENT = [(e, c) for e in EXAMPLES for c in CLASSES if c not in {CAPTURED, NORM} - {NORMS[e]}]


def _load(example):
    m = read(ROOT / "examples" / example / "manifest.json")
    layers = json.loads((ROOT / "examples" / CONFIG.get(example, example) / "config.json")
                        .read_text())["num_hidden_layers"]
    return m, layers


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_decode_step_s_classes_follow_the_model_s_layers(example):
    """Per layer: qkv, o, gate/up (+SiLU), down GEMMs; one attention with the rope + K/V
    writes folded in (kern-gen's default, ABI.md 3a‴); two RMSNorms (captured, or own where
    kern-gen's ``--own-norm`` default is on).  Plus lm_head,
    the rotary angles (the rope class's one dispatch), the final norm, and the embedding +
    argmax (own, not left out)."""
    m, layers = _load(example)
    assert class_counts(m) == {GEMM: 4 * layers + 1, ATTENTION: layers, ROPE: 1,
                               NORMS[example]: 2 * layers + 1, OTHER: 2}
    others = {m.kernels[d.kernel].impl.steps[0].symbol for d in m.programs["decode"].dispatches
              if kernel_class(m.kernels[d.kernel]) == OTHER}
    assert others == {"kern_embedding_bf16", "kern_argmax_bf16_partial"}


def _writes(m, d):
    return {a.buf for t, a in zip(m.kernels[d.kernel].params, d.args)
            if a.kind == "buf" and parse_param_type(t).direction != "in"}


@pytest.mark.parametrize("example, cls", PRESENT)
def test_the_step_without_a_class_verifies_and_keeps_everything_else(example, cls):
    m, _ = _load(example)
    doc = without(m, cls)
    assert verify(from_obj(doc)) == []
    orig = json.loads((ROOT / "examples" / example / "manifest.json").read_bytes())
    kept = [d for d in orig["programs"]["decode"]["dispatches"]
            if kernel_class(m.kernels[d["kernel"]]) != cls]
    assert doc["programs"]["decode"]["dispatches"] == kept
    assert len(kept) == len(orig["programs"]["decode"]["dispatches"]) - class_counts(m)[cls]
    for name, prog in orig["programs"].items():
        if name != "decode":
            assert doc["programs"][name] == prog
    for k in doc["kernels"]:
        assert doc["kernels"][k] == orig["kernels"][k]
    # buffers: a changed class only where decode now reads what only a dropped dispatch
    # had written; weights and states untouched
    dropped_writes = set().union(*(
        _writes(m, d) for d in m.programs["decode"].dispatches
        if kernel_class(m.kernels[d.kernel]) == cls))
    changed = {b for b, e in doc["buffers"].items() if e["class"] != orig["buffers"][b]["class"]}
    assert changed <= dropped_writes
    if cls in (GEMM, CAPTURED, NORM):   # their outputs feed the next layer: reclassified
        assert changed
    assert {doc["buffers"][b]["class"] for b in changed} <= {"carry", "input"}
    assert all(doc["buffers"][b] == e for b, e in orig["buffers"].items()
               if e["class"] == "weight")
    assert doc.get("states") == orig.get("states")


def test_a_class_the_program_lacks_or_a_missing_program_is_refused_by_name():
    m, _ = _load("smollm2-135m")
    with pytest.raises(KernRunError, match="has no program `nonexistent`"):
        without(m, GEMM, program="nonexistent")
    with pytest.raises(KernRunError, match="has no program `nonexistent`"):
        class_counts(m, program="nonexistent")
    with pytest.raises(KernRunError, match="has no nothing dispatches"):
        without(m, "nothing")
