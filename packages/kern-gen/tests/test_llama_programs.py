"""Programs and emitters (``kern_gen.llama.programs.PROGRAMS``, ``assemble.EMIT`` /
``GEMM_IMPLS`` / ``step``): the manifest's programs are PROGRAMS in order, every op kind has
an emitter (an unknown one is refused, not dropped), and the GEMM step is built in one place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kern_gen.llama import WiringError
from kern_gen.llama.assemble import EMIT, GEMM_IMPLS, Assembler, step
from kern_gen.llama.command import PRESETS
from kern_gen.llama.config import ModelConfig
from kern_gen.llama.ir import Op, Program, Ref
from kern_gen.llama.kv import KVLayout
from kern_gen.llama.programs import PROGRAMS

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
    assert {"mined", "gemm", "embedding", "angles", "attention", "argmax"} == set(EMIT)


def test_the_gemm_step_comes_from_gemm_impls():
    op = Op("gemm", "L0.mlp.down_proj", None, args={
        "a": Ref(buf="x"), "w": Ref(buf="w"), "c": Ref(buf="y"), "n": 64, "k": 128})
    asm = _asm()
    d = EMIT["gemm"](asm, "decode", op, 1)
    assert d["args"][3:] == [{"i32": 1}, {"i32": 64}, {"i32": 128}]
    (st,) = asm.kernels[d["kernel"]]["impl"]["steps"]
    assert st == step("extern:cublaslt_bf16_tn", st["params"], [1, 1, 1], [1, 1, 1],
                      [{"arg": i} for i in range(6)])
    assert "cubin" not in st and "shared_mem" not in st and list(GEMM_IMPLS) == ["cublaslt"]
    with pytest.raises(WiringError, match="GEMM implementation `gemv`: the generator has"):
        EMIT["gemm"](_asm(gemm_impl="gemv"), "decode", op, 1)
