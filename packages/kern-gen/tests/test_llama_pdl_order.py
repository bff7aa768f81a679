""":mod:`kern_gen.llama.pdl_order`: a ``state_first`` step that reads before its wait keeps
``pdl`` only after a predecessor that proves every earlier step complete; each refusal names
its place.  The trigger-after-wait fact itself is read from real code (the shipped GEMV and
rope angles) and from a patched copy."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kern_gen.llama import sass
from kern_gen.llama.pdl_order import (SMALL_EARLY_BYTES, early_triggers, order_problems,
                                      small_early_triggers)

ROOT = Path(__file__).resolve().parents[3]
KERNELS = ROOT / "examples" / "smollm2-135m" / "kernels"

EARLY = ("attn.cubin", "reader")          # reads before its wait
FACTS = {
    EARLY: sass.PdlFacts(wait=5, first_access=(1, "LDG"), trigger_at=40),
    ("gemv.cubin", "late_trigger"): sass.PdlFacts(3, (4, "LDG"), 50),
    ("gemv.cubin", "early_trigger"): sass.PdlFacts(9, (10, "LDG"), 2),
    ("gemv.cubin", "no_trigger"): sass.PdlFacts(3, (4, "LDG"), None),
    ("attn.cubin", "waits_first"): sass.PdlFacts(0, (1, "LDG"), 30),
    ("gemv.cubin", "kern_gemv_bf16"): sass.PdlFacts(3, (1, "LDG"), 50),
}
GEMV = ("gemv.cubin", "kern_gemv_bf16")
TWINS = {GEMV: "kern_gemv_et_bf16"}


def facts(file, symbol):
    return FACTS[(file, symbol)]


def manifest(prev: dict | None, prev_args=(), reader=EARLY):
    """One program: an optional predecessor dispatch, then the reader."""
    kernels = {"r": {"impl": {"steps": [{"symbol": reader[1], "cubin": reader[0],
                                         "pdl": True}]}}}
    disp = [{"kernel": "r", "args": [{"buf": "kv_lens"}]}]
    if prev is not None:
        kernels["p"] = {"impl": {"steps": [prev]}}
        disp.insert(0, {"kernel": "p", "args": list(prev_args)})
    return {"decode": {"dispatches": disp}}, kernels


def problems(prev, prev_args=(), reader=EARLY):
    programs, kernels = manifest(prev, prev_args, reader)
    return order_problems(programs, kernels, {EARLY, ("attn.cubin", "waits_first")}, facts)


@pytest.mark.parametrize("prev", [
    {"symbol": "late_trigger", "cubin": "gemv.cubin", "pdl": True},
    {"symbol": "no_trigger", "cubin": "gemv.cubin", "pdl": True},
    {"symbol": "early_trigger", "cubin": "gemv.cubin"},          # launched without PDL
], ids=["trigger-after-wait", "no-trigger", "no-pdl"])
def test_a_predecessor_that_proves_the_order_is_accepted(prev):
    assert problems(prev) == []


@pytest.mark.parametrize("prev, args, why", [
    ({"symbol": "early_trigger", "cubin": "gemv.cubin", "pdl": True}, (),
     "lets dependents launch before its own wait"),
    ({"symbol": "extern:cublaslt.gemm", "pdl": True}, (), "a PDL extern with no code"),
    ({"symbol": "late_trigger", "cubin": "gemv.cubin", "pdl": True}, ({"state": "kv.L0.k"},),
     "touches the state"),
    (None, (), "the program's first launch"),
], ids=["early-trigger", "extern", "state", "first"])
def test_each_refusal_names_the_step_and_why(prev, args, why):
    (p,) = problems(prev, args)
    where = "dispatches[1] (kernel `r`) step 0" if prev else "dispatches[0] (kernel `r`) step 0"
    assert p.startswith(f"programs.decode.{where}: `reader` reads inputs or state before")
    assert why in p


def test_a_reader_whose_code_waits_first_is_not_checked():
    prev = {"symbol": "early_trigger", "cubin": "gemv.cubin", "pdl": True}
    assert problems(prev, reader=("attn.cubin", "waits_first")) == []


def test_trigger_after_wait_is_read_from_the_code():
    gemv = (KERNELS / "gemv.cubin").read_bytes()
    f = sass.pdl_facts(gemv, "kern_gemv_bf16")
    assert f.trigger and f.wait < f.trigger_at and f.triggers_after_wait
    code = sass.function_code(gemv, "kern_gemv_bf16")
    first = bytearray(code)            # the PREEXIT copied over the first instruction
    pre = next(i for i in range(0, len(code), 16)
               if struct.unpack_from("<Q", code, i)[0] & 0xFFF == sass.PREEXIT)
    first[0:16] = code[pre:pre + 16]
    g = sass.pdl_facts(gemv.replace(code, bytes(first)), "kern_gemv_bf16")
    assert g.trigger_at == 0 and not g.triggers_after_wait
    rope = sass.pdl_facts((KERNELS / "rope_angles.cubin").read_bytes(), "kern_rope_angles_f32")
    assert rope.wait < rope.trigger_at


def early(prev, reader=EARLY, extra_step=False):
    programs, kernels = manifest(prev, reader=reader)
    if extra_step:
        kernels["p"]["impl"]["steps"].append(dict(prev))
    return early_triggers(programs, kernels, {EARLY, ("attn.cubin", "waits_first")}, facts,
                          TWINS)


def test_the_plain_gemv_before_an_early_reader_is_named():
    assert early({"symbol": GEMV[1], "cubin": GEMV[0], "pdl": True}) == {"p": TWINS[GEMV]}


@pytest.mark.parametrize("prev, reader, extra", [
    ({"symbol": GEMV[1], "cubin": GEMV[0], "pdl": True}, ("attn.cubin", "waits_first"), False),
    ({"symbol": GEMV[1], "cubin": GEMV[0]}, EARLY, False),
    ({"symbol": "late_trigger", "cubin": "gemv.cubin", "pdl": True}, EARLY, False),
    ({"symbol": GEMV[1], "cubin": GEMV[0], "pdl": True}, EARLY, True),
    (None, EARLY, False),
], ids=["reader-waits-first", "gemv-without-pdl", "other-kernel", "two-steps", "first"])
def test_no_other_kernel_is_named(prev, reader, extra):
    assert early(prev, reader, extra) == {}


SILU = ("gemv.cubin", "kern_gemv_silu_bf16")
SMALL_TWINS = {GEMV: "kern_gemv_et_bf16", SILU: "kern_gemv_silu_et_bf16"}
ROWS = {GEMV[1]: 1, SILU[1]: 2}


def small(program: str, step: dict, n: int, k: int) -> dict[str, str]:
    """small_early_triggers over one program with one GEMV dispatch ``[a, w, c, m, n, k]``."""
    kernels = {"g": {"impl": {"steps": [step]}}}
    args = [{"buf": "x"}, {"buf": "w"}, {"buf": "y"}, {"i32": 1}, {"i32": n}, {"i32": k}]
    return small_early_triggers({program: {"dispatches": [{"kernel": "g", "args": args}]}},
                                kernels, SMALL_TWINS, ROWS)


def test_a_small_decode_gemv_triggers_early():
    """SmolLM2's down (576 x 1536, 1.7 MB) and its gate/up pair (2 x 1536 x 576)."""
    assert small("decode", {"symbol": GEMV[1], "cubin": GEMV[0], "pdl": True}, 576, 1536) \
        == {"g": "kern_gemv_et_bf16"}
    assert small("decode", {"symbol": SILU[1], "cubin": SILU[0], "pdl": True}, 1536, 576) \
        == {"g": "kern_gemv_silu_et_bf16"}


@pytest.mark.parametrize("program, step, n, k", [
    ("decode", {"symbol": GEMV[1], "cubin": GEMV[0], "pdl": True}, 2560, 4096),   # Qwen3 o
    ("decode", {"symbol": GEMV[1], "cubin": GEMV[0], "pdl": True},
     SMALL_EARLY_BYTES // 2 // 1024, 1024),                                     # at the bound
    ("decode", {"symbol": SILU[1], "cubin": SILU[0], "pdl": True},
     SMALL_EARLY_BYTES // 4 // 1024, 1024),                  # gate + up rows reach the bound
    ("verify", {"symbol": GEMV[1], "cubin": GEMV[0], "pdl": True}, 576, 1536),
    ("decode", {"symbol": GEMV[1], "cubin": GEMV[0]}, 576, 1536),              # no PDL
    ("decode", {"symbol": "late_trigger", "cubin": "gemv.cubin", "pdl": True}, 576, 1536),
], ids=["large", "at-bound", "silu-at-bound", "verify", "no-pdl", "no-twin"])
def test_no_other_gemv_triggers_early_for_its_size(program, step, n, k):
    assert small(program, step, n, k) == {}


EARLY_SYMBOLS = ("kern_gemv_et_bf16", "kern_gemv_silu_et_bf16")


@pytest.mark.parametrize("example", ["smollm2-135m", "qwen3-4b", "smollm2-135m-dspark",
                                     "qwen3-4b-dspark"])
def test_the_examples_trigger_early_before_the_attention_and_where_small(example):
    """The Qwen3-4B shape: only the qkv GEMVs (each decode layer's attention follows one; in
    layer 0 the rope angles come between).  SmolLM2: every layer GEMV of decode (all under 16
    MiB), not its lm_head (57 MB) and nothing outside decode."""
    import json
    m = json.loads((ROOT / "examples" / example / "manifest.json").read_text())
    et = {n for n, k in m["kernels"].items()
          if any(s["symbol"] in EARLY_SYMBOLS for s in k["impl"]["steps"])}
    disp = m["programs"]["decode"]["dispatches"]
    gemvs = {d["kernel"] for d in disp if ".gemm" in d["kernel"]}
    if example.startswith("qwen3"):
        after = [disp[i + 1]["kernel"] for i, d in enumerate(disp) if d["kernel"] in et]
        assert after.count("decode.rope_attention") == len(after) - 1, after
        assert set(after) == {"decode.rope_attention", "rope_angles.2"}, after
        assert et == {"decode.gemm.6144x2560"}
    else:
        assert et == gemvs - {"decode.gemm.49152x576"}, sorted(et)
