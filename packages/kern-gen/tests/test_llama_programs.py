"""Programs and emitters (``kern_gen.llama.programs.PROGRAMS``, ``assemble.EMIT`` / ``step``,
``gemm.GEMM_IMPLS``): the manifest's programs are PROGRAMS in order, every op kind has
an emitter (an unknown one is refused, not dropped), and the GEMM step is built in one place."""

from __future__ import annotations

import json
from pathlib import Path

import re

import pytest

from kern_gen.llama import WiringError
from kern_gen.llama.assemble import EMIT, Assembler, step
from kern_gen.llama.command import PRESETS
from kern_gen.llama.config import ModelConfig
from kern_gen.llama.gemm import GEMM_IMPLS, PARAMS, gemv_warps
from kern_gen.llama.ir import TOK, Op, Program, Ref
from kern_gen.llama.kv import KVLayout
from kern_gen.llama.programs import FEW_ROWS, PROGRAMS

ROOT = Path(__file__).resolve().parents[3]
CFG = ModelConfig("toy", vocab=64, hidden=64, intermediate=128, layers=1, heads=4, max_positions=256,
                  kv_heads=2, head_dim=16, eps=1e-6, rope_theta=1e4, tie_embeddings=True)


def _asm(**kw) -> Assembler:
    return Assembler(None, CFG, KVLayout.of(CFG, 8), {}, "toy", **kw)


@pytest.mark.parametrize("name", [p for p in PRESETS
                                  if (ROOT / PRESETS[p][2] / "manifest.json").exists()])
def test_examples_hold_the_programs_in_order(name):
    m = json.loads((ROOT / PRESETS[name][2] / "manifest.json").read_text())
    assert list(m["programs"]) == list(PROGRAMS)
    readme = (ROOT / PRESETS[name][2] / "README.md").read_text()
    assert f"dispatches ({' / '.join(PROGRAMS)})" in readme


def test_an_op_without_emitter_is_refused():
    prog = Program("draft", 1, [Op("mystery", "L0.x")], {})
    with pytest.raises(WiringError, match="draft: op `L0.x` of kind `mystery` has no emitter"):
        _asm().manifest([prog], 8)
    assert {"mined", "gemm", "gemm_acc", "gemm_silu", "gemm_split", "gemm_norm",
            "gemm_rnorm", "gemm_rnorm_silu", "gemm_res", "embedding", "angles",
            "rope_kv", "attention", "rope_attention", "argmax", "markov", "accept",
            "norm_first", "norm_add"} == set(EMIT)


@pytest.mark.parametrize("change,needle", [
    ({"rank": 12}, "Markov rank 12; the own step kernel needs a multiple of 8 up to 256"),
    ({"rank": 264}, "Markov rank 264; the own step kernel needs a multiple of 8 up to 256"),
    ({"w2": Ref(buf="draft.markov_w2.weight", offset=8)},
     "`draft.markov_w2.weight` at byte offset 8; the step kernel needs 16-byte alignment"),
])
def test_markov_step_emitter_refuses_what_the_kernel_cannot_do(change, needle):
    """ABI.md 2a: rank a multiple of 8 up to the kernel's shared row, aligned tables."""
    asm = Assembler(None, CFG, KVLayout.of(CFG, 8), {"argmax.cubin": b"stand-in"}, "toy")
    args = {"prev": Ref(buf="token_ids"), "w1": Ref(buf="draft.markov_w1.weight"),
            "w2": Ref(buf="draft.markov_w2.weight"), "logits": Ref(buf="draft.logits"),
            "out": Ref(buf="draft_tokens"), "rank": 64}
    with pytest.raises(WiringError, match=re.escape(f"draft: markov0: {needle}")):
        EMIT["markov"](asm, "draft", Op("markov", "markov0", args={**args, **change}), TOK)


@pytest.mark.parametrize("change,needle", [
    ({"block": 31 + 1}, "block 32; the own acceptance kernel is one warp (block + 1 ≤ 32)"),
    ({"block": 0}, "block 0; the own acceptance kernel is one warp"),
    ({"next_pos": Ref(buf="next.token_ids")},
     "`next_pos` is `next.token_ids`; the caller contract names it `next.positions`"),
    ({"draft_lens": Ref(buf="next.draft_kv_lens", offset=8)},
     "`draft_lens` is `next.draft_kv_lens`; the caller contract names it"),
])
def test_accept_emitter_refuses_what_the_kernel_or_the_contract_cannot_take(change, needle):
    """ABI.md 6: one warp writes B + 1 rows; the outputs are the contract's, whole."""
    asm = Assembler(None, CFG, KVLayout.of(CFG, 8), {"accept.cubin": b"stand-in"}, "toy")
    args = {"ids": Ref(buf="token_ids"), "preds": Ref(buf="predictions"),
            "positions": Ref(buf="positions"), "next_ids": Ref(buf="next.token_ids"),
            "next_pos": Ref(buf="next.positions"), "draft_lens": Ref(buf="next.draft_kv_lens"),
            "verify_lens": Ref(buf="next.verify_kv_lens"), "block": 7, "mask": 0}
    with pytest.raises(WiringError, match=re.escape(f"verify: accept: {needle}")):
        EMIT["accept"](asm, "verify", Op("accept", "accept", args={**args, **change}), TOK)


@pytest.mark.parametrize("kind,args", [
    ("gemm_silu", {"c": Ref(buf="y"), "n": 64}),
    ("gemm_split", {"c0": Ref(buf="q"), "c1": Ref(buf="k"), "c2": Ref(buf="v"), "n0": 32,
                    "n1": 16, "n2": 16}),
])
def test_fused_gemv_emitters_refuse_what_the_kernel_traps_on(kind, args):
    """ABI.md 4a/4b: k % 8 == 0 and 16-byte aligned A and W, refused at generation."""
    asm = Assembler(None, CFG, KVLayout.of(CFG, 8), {"gemv.cubin": b"stand-in"}, "toy")
    base = {"a": Ref(buf="x"), "w": Ref(buf="w"), "k": 128, **args}
    with pytest.raises(WiringError, match="the own GEMV needs k % 8 == 0"):
        EMIT[kind](asm, "verify", Op(kind, "L0.f", args={**base, "k": 36}), TOK)
    with pytest.raises(WiringError, match="W at byte offset 8 of `w`; the own GEMV needs "
                                          "16-byte alignment"):
        EMIT[kind](asm, "verify", Op(kind, "L0.f", args={**base, "w": Ref(buf="w", offset=8)}),
                   TOK)


def _gemm_op():
    return Op("gemm", "L0.mlp.down_proj", None, args={
        "a": Ref(buf="x"), "w": Ref(buf="w"), "c": Ref(buf="y"), "n": 64, "k": 128})


def test_the_gemm_step_comes_from_gemm_impls():
    """Wide programs: the one cuBLASLt kernel `gemm`; few-row programs: one kernel per shape,
    declared by name even though the cuBLASLt bodies are equal (not merged into `gemm`)."""
    asm = _asm()
    wide = EMIT["gemm"](asm, "prefill", _gemm_op(), TOK)
    assert wide["kernel"] == "gemm" and wide["args"][3:] == [TOK, {"i32": 64}, {"i32": 128}]
    d = EMIT["gemm"](asm, "decode", _gemm_op(), 1)
    assert d["kernel"] == "decode.gemm.64x128"
    assert d["args"][3:] == [{"i32": 1}, {"i32": 64}, {"i32": 128}]
    assert asm.kernels["decode.gemm.64x128"] == asm.kernels["gemm"]
    (st,) = asm.kernels[d["kernel"]]["impl"]["steps"]
    assert st == step("extern:cublaslt_bf16_tn", st["params"], [1, 1, 1], [1, 1, 1],
                      [{"arg": i} for i in range(6)])
    assert "cubin" not in st and "shared_mem" not in st
    assert list(GEMM_IMPLS) == ["cublaslt", "gemv", "tma", "splitk"]
    assert FEW_ROWS == {"decode", "verify", "decode_spec", "draft"}
    with pytest.raises(WiringError, match="GEMM implementation `tiled`: the generator has "
                                          "cublaslt, gemv, splitk, tma"):
        EMIT["gemm"](_asm(gemm_impl="tiled"), "decode", _gemm_op(), 1)


GEMV = (Path(__file__).resolve().parents[3] / "examples" / "smollm2-135m" / "kernels" /
        "gemv.cubin").read_bytes()


def _gemv_asm():
    asm = _asm(gemm_impl="gemv")
    asm.own = {"gemv.cubin": GEMV}
    asm.own_sha = {"gemv.cubin": "ab" * 32}
    return asm


def test_the_gemv_impl_replaces_only_the_few_row_kernels():
    asm = _gemv_asm()
    wide = EMIT["gemm"](asm, "batch", _gemm_op(), TOK)
    ver = EMIT["gemm"](asm, "verify", _gemm_op(), TOK)
    dec = EMIT["gemm"](asm, "decode", _gemm_op(), 1)
    assert (wide["kernel"], ver["kernel"], dec["kernel"]) == \
        ("gemm", "verify.gemm.64x128", "decode.gemm.64x128")
    assert asm.kernels["gemm"]["impl"]["steps"][0]["symbol"] == "extern:cublaslt_bf16_tn"
    (sv,) = asm.kernels["verify.gemm.64x128"]["impl"]["steps"]
    (sd,) = asm.kernels["decode.gemm.64x128"]["impl"]["steps"]
    nw = gemv_warps(64, 128)
    assert nw == 4          # k 128 = 4 steps of 32
    assert sv == step("kern_gemv_bf16", PARAMS, [32 * nw, 1, 1],
                      [4, {"ceil_div": [TOK, 8]}, 1], [{"arg": i} for i in range(6)],
                      cubin="gemv.cubin", sha256="ab" * 32, pdl=True)
    assert sd["grid"] == [4, 1, 1] and sd["block"] == sv["block"]
    assert asm.cubins["gemv.cubin"].symbols == {"kern_gemv_bf16"}


def test_the_gemv_refuses_what_it_cannot_read():
    asm = _gemv_asm()
    op = _gemm_op()
    op.args["k"] = 132
    with pytest.raises(WiringError, match="k % 8 == 0"):
        EMIT["gemm"](asm, "decode", op, 1)
    op = _gemm_op()
    op.args["w"] = Ref(buf="w", offset=8)
    with pytest.raises(WiringError, match="W at byte offset 8 of `w`.*16-byte"):
        EMIT["gemm"](asm, "decode", op, 1)
    with pytest.raises(WiringError, match="own kernel `gemv.cubin` was not built"):
        EMIT["gemm"](_asm(gemm_impl="gemv"), "decode", _gemm_op(), 1)


@pytest.mark.parametrize("n,k,want", [(6144, 2560, 8), (2560, 4096, 16), (19456, 2560, 8),
                                      (2560, 9728, 16), (151936, 2560, 4), (4096, 2560, 16),
                                      (1024, 2560, 16), (9728, 2560, 8), (960, 576, 16),
                                      (576, 576, 16), (3072, 576, 16), (576, 1536, 16),
                                      (49152, 576, 4), (192, 576, 16), (64, 32, 1),
                                      (64, 96, 2), (16, 8, 1)])
def test_gemv_warps_rule(n, k, want):
    """A power of two <= 16, <= the k steps of 32, <= the grid cap (16 up to 256 blocks, 8 up
    to 2048, else 4: gemm.GEMV_WARP_CAPS, measured; ABI.md 4)."""
    assert gemv_warps(n, k) == want
