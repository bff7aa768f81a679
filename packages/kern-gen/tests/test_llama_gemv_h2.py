"""The 8-column-tile GEMV (issue 16; kernels/gemv_h2.cu, ABI.md 4h, ``kern_gen.llama.gemv_h2``):
the rule by shape (off by default; on, Qwen3-4B's o and down and nothing else of the
examples'), the warps a block, and the one-row steps it gives (the grid in 8-column blocks,
PDL from the cubin's code, the early twin for a small decode GEMV); the many-row programs
keep gemv.cu."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kern_gen.llama import gemv_h2 as H2
from kern_gen.llama.assemble import EMIT, Assembler
from kern_gen.llama.config import ModelConfig
from kern_gen.llama.gemm import EARLY_TWINS, PARAMS, WEIGHT_ROWS
from kern_gen.llama.ir import TOK, Op, Ref
from kern_gen.llama.kv import KVLayout

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
CFG = ModelConfig("toy", vocab=64, hidden=64, intermediate=128, layers=1, heads=4,
                  max_positions=256, kv_heads=2, head_dim=16, eps=1e-6, rope_theta=1e4,
                  tie_embeddings=True)
QWEN3 = [(6144, 2560), (2560, 4096), (2560, 9728), (151936, 2560)]
SMOL = [(960, 576), (576, 576), (576, 1536), (49152, 576)]


def test_the_rule_is_off_by_default():
    assert not any(H2.use_h2(1, n, k) for n, k in QWEN3 + SMOL)
    assert not any(H2.use_h2(1, n, k, silu=True) for n, k in [(9728, 2560), (1536, 576)])


def test_the_rule_at_133_blocks_picks_qwen3_o_and_down(monkeypatch):
    monkeypatch.setattr(H2, "MIN_BLOCKS", 133)
    assert [H2.use_h2(1, n, k) for n, k in QWEN3] == [False, True, True, False]
    assert not any(H2.use_h2(1, n, k) for n, k in SMOL)
    assert not H2.use_h2(8, 2560, 4096) and not H2.use_h2(TOK, 2560, 4096)   # one row only
    assert not H2.use_h2(1, 2560, 4104)                                       # k % 16
    assert not H2.use_h2(1, 2560 * 2, 4096)                # 320 blocks: already two a SM


def test_warps_stream_the_bytes_of_gemv_cu():
    """Twice the blocks, each half of k: Qwen3 o / down 8 warps (gemv.cu: 16 at 160 blocks),
    SmolLM2 o 8 (k / 2 = 288 is 9 steps: no idle warp)."""
    got = {(n, k): H2.h2_warps(n, k) for n, k in [(2560, 4096), (2560, 9728), (576, 576),
                                                  (576, 1536), (2 * 9728, 2560)]}
    assert got == {(2560, 4096): 8, (2560, 9728): 8, (576, 576): 8, (576, 1536): 16,
                   (2 * 9728, 2560): 4}


def test_the_twins_are_registered():
    assert EARLY_TWINS[(H2.H2_CUBIN, H2.PLAIN)] == "kern_gemv_h2_et_bf16"
    assert EARLY_TWINS[(H2.H2_CUBIN, H2.SILU_SYMBOL)] == "kern_gemv_silu_h2_et_bf16"
    assert WEIGHT_ROWS[H2.PLAIN] == 1 and WEIGHT_ROWS[H2.SILU_SYMBOL] == 2


@pytest.fixture(scope="module")
def h2_cubin() -> bytes:
    sys.path.insert(0, str(KERNELS / "tests"))
    import _own_kernels_gpu
    return _own_kernels_gpu.cubin_bytes("gemv_h2.cu")


def _asm(cubin: bytes) -> Assembler:
    asm = Assembler(None, CFG, KVLayout.of(CFG, 8), {}, "toy", gemm_impl="gemv")
    asm.own = {"gemv.cubin": b"", H2.H2_CUBIN: cubin}
    asm.own_sha = {"gemv.cubin": "ab" * 32, H2.H2_CUBIN: "cd" * 32}
    return asm


def _op(kind: str, n: int, k: int) -> Op:
    return Op(kind, "L0.mlp", None, args={"a": Ref(buf="x"), "w": Ref(buf="w"),
                                          "c": Ref(buf="y"), "n": n, "k": k})


def test_one_row_steps(monkeypatch, h2_cubin):
    monkeypatch.setattr(H2, "MIN_BLOCKS", 1)
    monkeypatch.setattr(H2, "SILU", 1)
    asm = _asm(h2_cubin)
    d = EMIT["gemm"](asm, "decode", _op("gemm", 72, 128), 1)
    (st,) = asm.kernels[d["kernel"]]["impl"]["steps"]
    assert (st["symbol"], st["cubin"], st["grid"], st["block"], st["pdl"]) == \
        (H2.PLAIN, H2.H2_CUBIN, [9, 1, 1], [32 * H2.h2_warps(72, 128), 1, 1], True)
    assert st["params"] == PARAMS and "8 columns" in asm.sources[d["kernel"]]
    s = EMIT["gemm_silu"](asm, "decode", _op("gemm_silu", 64, 128), 1)
    (st,) = asm.kernels[s["kernel"]]["impl"]["steps"]
    assert (st["symbol"], st["grid"]) == (H2.SILU_SYMBOL, [8, 1, 1])
    assert st["block"] == [32 * H2.h2_warps(128, 128), 1, 1]


def test_early_twin_launch(monkeypatch, h2_cubin):
    """A small decode GEMV on gemv_h2.cu gets its early twin (pdl_order.small_early_triggers)
    with the same geometry."""
    monkeypatch.setattr(H2, "MIN_BLOCKS", 1)
    asm = _asm(h2_cubin)
    d = EMIT["gemm"](asm, "decode", _op("gemm", 72, 128), 1)
    progs = {"decode": {"dispatches": [d]}}
    asm._trigger_early(progs)
    (st,) = asm.kernels[d["kernel"]]["impl"]["steps"]
    assert st["symbol"] == "kern_gemv_h2_et_bf16" and st["grid"] == [9, 1, 1] and st["pdl"]
