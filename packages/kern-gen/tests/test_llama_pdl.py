"""Programmatic dependent launch (issue 16): kern-gen marks a step ``pdl`` only where the
kernel's machine code waits on the grid dependency (SASS ACQBULK) before any global memory
access (:mod:`kern_gen.llama.sass`), read from the committed examples' cubins and the
captures' modules."""

from __future__ import annotations

import json
import lzma
import struct
from pathlib import Path

import pytest

from kern_gen.llama import sass

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = [ROOT / "examples" / "smollm2-135m", ROOT / "examples" / "qwen3-4b"]
NOP = 0x918        # an instruction that is neither a wait nor a memory access


def _patch(code_owner: bytes, symbol: str, opcode: int, new: int) -> bytes:
    """``code_owner`` with every ``opcode`` instruction of ``symbol`` turned into ``new``."""
    code = sass.function_code(code_owner, symbol)
    start = code_owner.index(code)
    out = bytearray(code_owner)
    for i in range(0, len(code), 16):
        lo = struct.unpack_from("<Q", code, i)[0]
        if lo & 0xFFF == opcode:
            struct.pack_into("<Q", out, start + i, (lo & ~0xFFF) | new)
    return bytes(out)


def _own(name: str) -> bytes:
    return (EXAMPLES[0] / "kernels" / name).read_bytes()


def test_own_kernels_wait_before_their_first_access():
    f = sass.pdl_facts(_own("embedding.cubin"), "kern_embedding_bf16")
    assert f.waits_first and f.trigger
    assert sass.pdl_wait(_own("argmax.cubin"), "kern_argmax_bf16_reduce")


def test_removing_the_wait_removes_pdl():
    data = _own("embedding.cubin")
    cut = _patch(data, "kern_embedding_bf16", sass.ACQBULK, NOP)
    assert sass.pdl_wait(data, "kern_embedding_bf16")
    assert not sass.pdl_wait(cut, "kern_embedding_bf16")
    assert sass.pdl_facts(cut, "kern_embedding_bf16").wait is None


def test_a_predicated_wait_does_not_count():
    data = _own("rope_angles.cubin")
    code = sass.function_code(data, "kern_rope_angles_f32")
    i = next(i for i in range(0, len(code), 16)
             if struct.unpack_from("<Q", code, i)[0] & 0xFFF == sass.ACQBULK)
    out = bytearray(data)
    at = data.index(code) + i
    lo = struct.unpack_from("<Q", out, at)[0]
    struct.pack_into("<Q", out, at, (lo & ~0xF000) | 0x0000)      # guard @P0
    assert not sass.pdl_wait(bytes(out), "kern_rope_angles_f32")


def test_a_load_before_the_wait_refuses_pdl_unless_only_weights_are_read_first():
    cut = _patch(_own("embedding.cubin"), "kern_embedding_bf16", sass.ACQBULK, NOP)
    code = sass.function_code(cut, "kern_embedding_bf16")
    first = sass.pdl_facts(cut, "kern_embedding_bf16").first_access[0]
    late = bytearray(code)          # a wait one instruction after the first memory access
    lo = struct.unpack_from("<Q", late, 16 * (first + 1))[0]
    struct.pack_into("<Q", late, 16 * (first + 1), (lo & ~0xFFFF) | 0x7000 | sass.ACQBULK)
    patched = cut.replace(code, bytes(late))
    g = sass.pdl_facts(patched, "kern_embedding_bf16")
    assert g.wait == first + 1 and not g.waits_first
    assert not sass.pdl_wait(patched, "kern_embedding_bf16")
    assert sass.pdl_wait(patched, "kern_embedding_bf16", weights_first=True)


def test_accesses_before_the_wait_are_counted():
    """The shipped GEMV requests its first W batch before its wait (4 steps x 2 rows,
    kernels/tests/test_prewait.py) and the embedding nothing; a wait moved after the first
    access counts that access; no wait: all."""
    assert sass.accesses_before_wait(_own("gemv.cubin"), "kern_gemv_bf16") == 8
    assert sass.accesses_before_wait(_own("embedding.cubin"), "kern_embedding_bf16") == 0
    cut = _patch(_own("embedding.cubin"), "kern_embedding_bf16", sass.ACQBULK, NOP)
    code = sass.function_code(cut, "kern_embedding_bf16")
    total = sum(struct.unpack_from("<Q", code, i)[0] & 0xFFF in sass.GLOBAL_MEMORY
                for i in range(0, len(code), 16))
    assert total > 1 and sass.accesses_before_wait(cut, "kern_embedding_bf16") == total
    first = sass.pdl_facts(cut, "kern_embedding_bf16").first_access[0]
    late = bytearray(code)
    lo = struct.unpack_from("<Q", late, 16 * (first + 1))[0]
    struct.pack_into("<Q", late, 16 * (first + 1), (lo & ~0xFFFF) | 0x7000 | sass.ACQBULK)
    assert sass.accesses_before_wait(cut.replace(code, bytes(late)), "kern_embedding_bf16") == 1


@pytest.mark.parametrize("bad, msg", [(b"not an elf", "ELF64"),
                                      (None, "no function `nope`")])
def test_unreadable_code_is_refused_with_the_reason(bad, msg):
    with pytest.raises(sass.CubinError, match=msg):
        sass.function_code(bad if bad is not None else _own("embedding.cubin"),
                           "nope" if bad is None else "x")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_pdl_step_of_the_examples_waits_first_in_its_cubin(example):
    """Read back from the written files: a step has ``pdl`` exactly when the code of its
    symbol in its cubin waits on the grid dependency first (own GEMV kernels may read
    weights before the wait: :func:`sass.pdl_wait` ``weights_first``; the cluster rope
    attention also inputs and old cache rows, ``state_first``, whose launch order
    test_llama_pdl_order.py checks)."""
    m = json.loads((example / "manifest.json").read_bytes())
    seen = {True: 0, False: 0}
    for kern in m["kernels"].values():
        for s in kern["impl"]["steps"]:
            if "cubin" not in s:
                assert "pdl" not in s            # externs run through the runtime's library
                continue
            data = (example / "kernels" / s["cubin"]).read_bytes()
            early = s["symbol"].startswith(("kern_gemv", "kern_attn_decode_cluster_rope"))
            want = sass.pdl_wait(data, s["symbol"], weights_first=early)
            assert s.get("pdl", False) is want, (s["symbol"], s["cubin"])
            seen[want] += 1
    assert seen[True] > 0


def test_a_captured_kernel_that_loads_before_its_wait_gets_no_pdl():
    """SmolLM2's q/k rope kernel (Inductor ``launch_pdl``) loads its input before
    ``gdc_wait()``: replayed with PDL it could read the previous kernel's output early.
    (Own ``kern_*`` kernels are not captured: the GEMVs load weights before their wait on
    purpose, ``weights_first``.)"""
    m = json.loads((EXAMPLES[0] / "manifest.json").read_bytes())
    late = []
    for k in m["kernels"].values():
        for s in k["impl"]["steps"]:
            if "cubin" in s and not s["symbol"].startswith("kern_"):
                f = sass.pdl_facts((EXAMPLES[0] / "kernels" / s["cubin"]).read_bytes(),
                                   s["symbol"])
                if f.wait is not None and not f.waits_first:
                    late.append(s)
    assert any("cos_mul_neg_sin" in s["symbol"] for s in late)
    assert all("pdl" not in s for s in late)


def test_captured_modules_carry_the_wait():
    """The capture was made with Inductor's PDL: some of its kernels wait (a capture without
    it has none, and the examples would have no pdl steps on mined kernels)."""
    mods = ROOT / "tests" / "fixtures" / "captures" / "qwen3-4b-random" / "modules"
    waits = 0
    for f in sorted(mods.glob("*.cubin.xz")):
        data = lzma.decompress(f.read_bytes())
        waits += data.count(struct.pack("<H", 0x7000 | sass.ACQBULK) + b"\0" * 6)
    assert waits > 0
