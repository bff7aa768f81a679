"""RMSNorm into the GEMV's prologue (``kern_gen.llama.fuse_norm``): on both committed captures
the fused ``decode`` normalises exactly the residual stream of the model (the embedding plus
every earlier ``o_proj`` and ``down_proj`` output, in order) and every kept op reads what it
read before; each precondition refuses an altered program."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from kg_own import fused_decode, norm_at

from kern_gen.llama import WiringError
from kern_gen.llama.command import PRESETS, _command
from kern_gen.llama.fuse_norm import PARTS, RESIDUAL, fuse_norms
from kern_gen.llama.own_norm import own_norms
from kern_gen.llama.gemm import gemm_norm
from kern_gen.llama.ir import TOK, Op, Ref, reads, writes

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", params=[p for p in ("llama", "qwen3")
                                        if (ROOT / PRESETS[p][0]).is_dir()])
def decode(request, tmp_path_factory):
    return fused_decode(request.param, tmp_path_factory.mktemp("mined"))


def _producers(ops: list[Op], names: dict[str, str]) -> dict[str, list[str]]:
    """op label -> the producer label of each workspace it reads (weights left out); a
    producer is named ``names.get(label, label)``."""
    last: dict[tuple[str, int], str] = {}
    out: dict[str, list[str]] = {}
    for o in ops:
        out[o.label] = [last.get((r.buf, r.offset), "<input>") for r in reads(o)
                        if r.buf and not r.buf.startswith("model.")]
        last.update({(r.buf, r.offset): names.get(o.label, o.label) for _, r in writes(o)})
    return out


def test_fused_decode_normalises_the_residual_stream(decode):
    cfg, arch, prog = decode
    fused = fuse_norms(prog, cfg, arch)
    assert len(prog.ops) - len(fused.ops) == 2 * cfg.layers + 1
    kinds = [o.kind for o in fused.ops]
    assert kinds.count("gemm_res") == 2 * cfg.layers
    assert kinds.count("gemm_norm") == 1
    assert kinds.count("gemm_rnorm") + kinds.count("gemm_rnorm_silu") == 2 * cfg.layers
    norms = [o for o in fused.ops if o.kind in ("gemm_norm", "gemm_rnorm", "gemm_rnorm_silu")]
    assert [o.args["g"].buf for o in norms] == arch.norm_weights(cfg)
    res, parts = RESIDUAL.format(p="decode"), PARTS.format(p="decode")
    # symbolic replay: the residual each norm normalises, as the producers summed into it,
    # and the partial sums it reads come from the last GEMM that added to it
    last: dict[str, str] = {}
    value: Counter = Counter()
    expected = Counter({"embed": 1})
    for o in fused.ops:
        if o.kind == "gemm_norm":
            assert last[o.args["x"].buf] == "embed" and o.args["xo"].buf == res
            value = Counter({"embed": 1})
        elif o.kind == "gemm_res":
            assert o.args["res"].buf == res and o.args["parts"].buf == parts
            assert o.label.endswith(("o_proj", "down_proj"))
            value[o.label] += 1
        elif o in norms:
            t = norms.index(o)
            layer = (t - 1) // 2
            expected[f"L{layer}.self_attn.o_proj" if t % 2 else f"L{layer}.mlp.down_proj"] += 1
            assert (o.args["r"].buf, o.args["ss"].buf) == (res, parts)
            assert last[parts] == (f"L{layer}.self_attn.o_proj" if t % 2
                                   else f"L{layer}.mlp.down_proj")
            assert o.args["p"] == -(-cfg.hidden // 16)
        if o in norms:
            assert value == expected, o.label
            assert o.args["eps"] == cfg.eps
        for _, r in writes(o):
            last[r.buf] = o.label
    assert sum(expected.values()) == 2 * cfg.layers + 1
    # every other op reads its workspaces from the producers it read them from before
    gemvs = [prog.ops[j + 1].label for j in range(len(prog.ops) - 1)
             if prog.ops[j].kind == "mined" and prog.ops[j + 1].kind in ("gemm", "gemm_silu")
             and prog.ops[j + 1].args["a"] == prog.ops[j].ptrs[max(prog.ops[j].ptrs)][1]]
    assert len(gemvs) == len(norms)
    before = _producers(prog.ops, {})
    after = _producers(fused.ops, {o.label: g for o, g in zip(norms, gemvs)})
    kept = [o.label for o in fused.ops if o not in norms and o.kind != "gemm_res"]
    assert len(kept) > 2 * cfg.layers
    for label in kept:
        assert after[label] == before[label], label
    assert {res, parts} <= set(fused.bufs)
    assert fused.bufs[res].dtype == fused.bufs[parts].dtype == "f32"


def test_a_missing_norm_is_refused(decode):
    cfg, arch, prog = decode
    j = norm_at(prog, 3)
    bad = replace(prog, ops=prog.ops[:j] + prog.ops[j + 1:])
    with pytest.raises(WiringError, match="the norms to replace are"):
        fuse_norms(bad, cfg, arch)


def test_the_op_after_a_norm_must_be_a_gemv_of_its_output(decode):
    cfg, arch, prog = decode
    j = norm_at(prog, 2)
    ops = list(prog.ops)
    ops[j + 1] = replace(ops[j + 1], args={**ops[j + 1].args, "a": Ref(buf="elsewhere")})
    with pytest.raises(WiringError, match="not a GEMV of its output"):
        fuse_norms(replace(prog, ops=ops), cfg, arch)


def test_a_norm_must_add_the_gemm_before_it(decode):
    cfg, arch, prog = decode
    j = norm_at(prog, 1)
    ops = list(prog.ops)
    ops[j - 1] = replace(ops[j - 1], args={**ops[j - 1].args, "c": Ref(buf="elsewhere")})
    with pytest.raises(WiringError, match="does not read"):
        fuse_norms(replace(prog, ops=ops), cfg, arch)
    ops = list(prog.ops)
    ops[j - 1] = replace(ops[j - 1], label="L0.mlp.down_proj")
    with pytest.raises(WiringError, match="not the layer's o_proj GEMM"):
        fuse_norms(replace(prog, ops=ops), cfg, arch)


def test_the_first_norm_reads_only_the_embedding(decode):
    cfg, arch, prog = decode
    j = norm_at(prog, 0)
    ops = list(prog.ops)
    # one more input, before the normed output (which stays the last pointer)
    ops[j] = replace(ops[j], ptrs={-1: ("in", Ref(buf="token_ids")), **ops[j].ptrs})
    with pytest.raises(WiringError, match="not exactly the embedding's output"):
        fuse_norms(replace(prog, ops=ops), cfg, arch)


@pytest.mark.parametrize("rewrite,option", [(fuse_norms, "--fuse-norm"),
                                            (own_norms, "--own-norm")])
def test_a_later_reader_of_a_dropped_norms_output_is_refused(decode, rewrite, option):
    """Both norm passes (:mod:`.fuse_norm`, :mod:`.own_norm`) drop the captured norms."""
    cfg, arch, prog = decode
    j = norm_at(prog, 4)
    inout = [r for d, r in prog.ops[j].ptrs.values() if d == "inout"]
    written = inout[0] if inout else prog.ops[j].ptrs[max(prog.ops[j].ptrs)][1]
    reader = Op("mined", "L9.reader", None, ptrs={0: ("in", written), 1: ("out", Ref(buf="z"))})
    ops = list(prog.ops)
    ops.insert(j + 2, reader)
    with pytest.raises(WiringError, match=f"which {option} drops"):
        rewrite(replace(prog, ops=ops), cfg, arch)


def test_a_reader_of_a_replaced_gemms_output_is_refused(decode):
    cfg, arch, prog = decode
    j = norm_at(prog, 2)               # L0's down_proj is at j - 1
    reader = Op("mined", "L9.reader", None,
                ptrs={0: ("in", prog.ops[j - 1].args["c"]), 1: ("out", Ref(buf="z"))})
    ops = list(prog.ops)
    ops.insert(j + 2, reader)
    with pytest.raises(WiringError, match="added to the residual instead"):
        fuse_norms(replace(prog, ops=ops), cfg, arch)


def test_the_kernel_holds_one_block_of_rows():
    op = Op("gemm_norm", "L0.input_layernorm+qkv_proj", None,
            args={"x": Ref(buf="e"), "g": Ref(buf="model.norm.weight"), "xo": Ref(buf="r"),
                  "w": Ref(buf="model.w"), "c": Ref(buf="c"), "n": 16, "k": 2560,
                  "eps": 1e-6})
    with pytest.raises(WiringError, match="do not fit"):
        gemm_norm(None, "verify", op, TOK)          # type: ignore[arg-type]
    with pytest.raises(WiringError, match="do not fit"):
        gemm_norm(None, "decode", op, 4)            # type: ignore[arg-type]
    wide = Op("gemm_norm", op.label, None, args={**op.args, "k": 4104})
    with pytest.raises(WiringError, match="do not fit"):
        gemm_norm(None, "decode", wide, 1)          # type: ignore[arg-type]


def test_the_regeneration_command_names_a_non_default_choice():
    assert _command("llama", "gemv").endswith("kern-gen llama")
    assert _command("llama", "gemv", fuse_norm=True).endswith("kern-gen llama --fuse-norm")


@pytest.mark.skipif(not (ROOT / PRESETS["llama"][0]).is_dir(), reason="capture absent")
@pytest.mark.parametrize("gemm,fuse", [("tma", True), ("gemv", False), ("cublaslt", True)])
def test_fuse_norm_needs_the_register_gemv_and_fuse(gemm, fuse):
    from kg_own import own_committed

    from kern_gen.llama.pipeline import generate
    cap, cfg, ex = (ROOT / p for p in PRESETS["llama"][:3])
    with pytest.raises(WiringError, match="--fuse-norm needs --gemm gemv and --fuse"):
        generate(cap, cfg, gemm=gemm, fuse=fuse, fuse_norm=True, own_cubins=own_committed(ex))


def test_the_cli_refuses_fuse_norm_with_another_gemm(tmp_path):
    from typer.testing import CliRunner

    from kern_gen.cli import app
    r = CliRunner().invoke(app, ["llama", "--gemm", "cublaslt", "--fuse-norm", "--out",
                                 str(tmp_path / "o")])
    assert r.exit_code != 0
    assert "--fuse-norm needs --gemm gemv and --fuse" in r.output
    assert not (tmp_path / "o").exists()
