"""The RMSNorms as own launches (``kern_gen.llama.own_norm``, ``--own-norm``): on both
committed captures ``decode`` keeps its op count, every norm becomes one own launch over the
f32 residual stream (norm 0 from the embedding's output, norm ``t > 0`` adding the output of
the GEMM right before it), every other op is unchanged; the generated manifest verifies with
the same dispatches a step; each refusal is tested (the shared proofs of
``kern_gen.llama.fuse_norm``, and the stale-reader refusal of both passes, in
test_llama_fuse_norm.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from kg_own import fused_decode, norm_at, own_committed

from kern_gen.llama import WiringError
from kern_gen.llama.command import PRESETS, _command
from kern_gen.llama.fuse_norm import RESIDUAL
from kern_gen.llama.ir import Op, Ref
from kern_gen.llama.own_norm import norm, own_norms, threads

ROOT = Path(__file__).resolve().parents[3]
HAVE = [p for p in ("llama", "qwen3") if (ROOT / PRESETS[p][0]).is_dir()]


@pytest.fixture(scope="module", params=HAVE)
def decode(request, tmp_path_factory):
    return fused_decode(request.param, tmp_path_factory.mktemp("mined"))


def test_every_norm_is_one_own_launch_over_the_residual_stream(decode):
    cfg, arch, prog = decode
    own = own_norms(prog, cfg, arch)
    assert len(own.ops) == len(prog.ops)
    kinds = [o.kind for o in own.ops]
    assert kinds.count("norm_first") == 1 and kinds.count("norm_add") == 2 * cfg.layers
    assert "norm_first" not in kinds[kinds.index("norm_first") + 1:]
    norms = [o for o in own.ops if o.kind.startswith("norm_")]
    assert [o.args["g"].buf for o in norms] == arch.norm_weights(cfg)
    res = RESIDUAL.format(p="decode")
    assert own.bufs[res].dtype == "f32" and own.bufs[res].cls == "workspace"
    embed = next(o for o in prog.ops if o.kind == "embedding")
    assert norms[0].args["x"] == embed.args["out"] and norms[0].args["xo"].buf == res
    for j, (old, new) in enumerate(zip(prog.ops, own.ops)):
        if not new.kind.startswith("norm_"):
            assert new is old, new.label           # nothing else changes
            continue
        assert new.label == old.label
        assert new.args["out"] == prog.ops[j + 1].args["a"]     # the GEMV after it reads it
        if new.kind == "norm_add":                  # the GEMM right before it, o or down
            before = prog.ops[j - 1]
            assert before.label.rsplit(".", 1)[-1] in ("o_proj", "down_proj")
            assert new.args["d"] == before.args["c"] and new.args["res"].buf == res


def test_a_missing_norm_is_refused(decode):
    cfg, arch, prog = decode
    j = norm_at(prog, 5)
    with pytest.raises(WiringError, match="the norms to replace are"):
        own_norms(replace(prog, ops=prog.ops[:j] + prog.ops[j + 1:]), cfg, arch)


def test_a_norm_that_does_not_add_the_gemm_before_it_is_refused(decode):
    cfg, arch, prog = decode
    j = norm_at(prog, 2)
    ops = list(prog.ops)
    ops[j - 1] = replace(ops[j - 1], args={**ops[j - 1].args, "c": Ref(buf="elsewhere")})
    with pytest.raises(WiringError, match="does not read"):
        own_norms(replace(prog, ops=ops), cfg, arch)


@pytest.mark.parametrize("k", [2564, 8200, 0])
def test_a_row_the_kernel_cannot_hold_is_refused(k):
    op = Op("norm_add", "L3.post_attention_layernorm", None,
            args={"d": Ref(buf="d"), "res": Ref(buf="r"), "g": Ref(buf="model.norm.weight"),
                  "out": Ref(buf="o"), "k": k, "eps": 1e-6})
    with pytest.raises(WiringError, match="needs a multiple of 8 up to 8192"):
        norm(None, "decode", op, 1)                 # type: ignore[arg-type]


def test_one_warp_per_256_elements():
    assert [threads(k) for k in (576, 2560, 4096, 8192)] == [96, 320, 512, 1024]


def test_the_regeneration_command_names_it():
    assert _command("qwen3", "gemv", own_norm=True).endswith("kern-gen qwen3 --own-norm")


@pytest.mark.skipif(not HAVE, reason="capture absent")
def test_the_generated_manifest_keeps_its_dispatches_and_verifies():
    from kern_gen.llama.pipeline import generate
    cap, cfg, ex = (ROOT / p for p in PRESETS[HAVE[0]][:3])
    r = generate(cap, cfg, own_norm=True, own_cubins=own_committed(ex) | _rmsnorm())
    got = json.loads(r.manifest)["programs"]
    want = json.loads((ex / "manifest.json").read_text())["programs"]
    assert {p: len(v["dispatches"]) for p, v in got.items()} == \
        {p: len(v["dispatches"]) for p, v in want.items()}
    kernels = [d["kernel"] for d in got["decode"]["dispatches"]]
    assert sum(k.startswith("decode.norm_") for k in kernels) == 2 * _layers(cfg) + 1
    assert not any("layernorm" in k or k.startswith("decode.norm.") for k in kernels)
    assert "rmsnorm.cubin" in r.cubins


def _rmsnorm() -> dict[str, bytes]:
    """rmsnorm.cubin, built now (for generating without nvcc's whole build)."""
    import sys
    sys.path.insert(0, str(ROOT / "packages/kern-gen/kernels/tests"))
    import _own_kernels_gpu
    return {"rmsnorm.cubin": _own_kernels_gpu.cubin_bytes("rmsnorm.cu")}


def _layers(config: Path) -> int:
    return json.loads(config.read_text())["num_hidden_layers"]


@pytest.mark.skipif(not HAVE, reason="capture absent")
@pytest.mark.parametrize("kw,match", [
    ({"fuse_norm": True}, "exclude each other"),
    ({"gemm": "cublaslt"}, "needs an own GEMV"),
    ({"fuse": False}, "needs an own GEMV")])
def test_own_norm_refuses_what_it_cannot_rewrite(kw, match):
    from kern_gen.llama.pipeline import generate
    cap, cfg, ex = (ROOT / p for p in PRESETS[HAVE[0]][:3])
    with pytest.raises(WiringError, match=match):
        generate(cap, cfg, own_norm=True, own_cubins=own_committed(ex), **kw)


@pytest.mark.parametrize("fuse_norm,own_norm,gemm,extension,model,want", [
    (None, None, "gemv", False, "qwen3", (False, True)),      # the qwen3 default
    (None, None, "gemv", False, "llama", (False, True)),      # the llama default (session 30)
    (None, None, "gemv", True, "llama", (False, False)),      # DSpark SmolLM2's decode
    (None, None, "gemv", False, "mistral", (False, False)),   # no default for this model type
    (None, None, "gemv", True, "qwen3", (False, False)),      # a DSpark manifest's decode
    (True, None, "gemv", False, "qwen3", (True, False)),      # --fuse-norm asked for
    (None, None, "cublaslt", False, "qwen3", (False, False)),  # no own GEMV
    (None, False, "gemv", False, "qwen3", (False, False)),    # --no-own-norm
    (None, True, "gemv", False, "llama", (False, True)),      # --own-norm
])
def test_the_own_norm_default_is_the_model_s(fuse_norm, own_norm, gemm, extension, model,
                                            want):
    from kern_gen.llama.pipeline import _norm_choices
    assert _norm_choices(fuse_norm, own_norm, gemm, True, extension, model) == want


def test_an_own_norm_asked_for_with_an_extension_is_refused():
    from kern_gen.llama.pipeline import _norm_choices
    with pytest.raises(WiringError, match="no extension"):
        _norm_choices(None, True, "gemv", True, True, "qwen3")
