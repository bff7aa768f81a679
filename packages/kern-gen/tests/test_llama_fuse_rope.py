"""Rope + cache writes in one launch (``kern_gen.llama.fuse_rope``, ``fuse_rope_qk_norm``): on the
SmolLM2 capture every layer's three rope kernels of ``decode`` (two of ``verify``) become one
``rope_kv`` that reads what they read and feeds what they fed; on the Qwen3 capture the decode
ones with the q/k norm inside too (with the layer's norm weights), and verify's six; each
proved fact refuses an altered program."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest
from kg_own import wiring_inputs

from kern_gen.llama import WiringError
from kern_gen.llama import merge as M
from kern_gen.llama.command import PRESETS
from kern_gen.llama.fuse import fuse_program
from kern_gen.llama.fuse_rope import fuse_rope
from kern_gen.llama.rope_facts import ROPE_OPS, aten_ops
from kern_gen.llama.ir import Op, Ref, reads, writes
from kern_gen.llama.programs import PROGRAMS

ROOT = Path(__file__).resolve().parents[3]


def _decode(preset: str, tmp: Path, program: str = "decode"):
    if not (ROOT / PRESETS[preset][0]).is_dir():
        pytest.skip(f"no {preset} capture")
    _, cfg, g = wiring_inputs(preset, tmp)
    return cfg, fuse_program(M.merge_projections(PROGRAMS[program](g), cfg))


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    return _decode("llama", tmp_path_factory.mktemp("mined"))


@pytest.fixture(scope="module")
def smol_verify(tmp_path_factory):
    return _decode("llama", tmp_path_factory.mktemp("mined"), "verify")


def _replay(ops: list[Op]) -> dict[str, list[str]]:
    """op label -> the producer of each workspace it reads (a rope_kv's q output named after
    the q rope it replaces)."""
    last: dict[tuple[str, int], str] = {}
    out: dict[str, list[str]] = {}
    for o in ops:
        out[o.label] = [last.get((r.buf, r.offset), "<input>") for r in reads(o)
                        if r.buf and not r.buf.startswith("model.")]
        for _, r in writes(o):
            last[(r.buf, r.offset)] = (f"{o.label.split('.')[0]}.q_rope" if o.kind == "rope_kv"
                                       else o.label)
    return out


def test_every_smollm2_layer_is_fused_and_reads_what_it_read(smol):
    cfg, plain = smol
    fused, n = fuse_rope(plain, cfg)
    assert n == cfg.layers and len(plain.ops) - len(fused.ops) == 2 * cfg.layers
    assert not any(o.label.split(".")[-1] in ("k_rope_cache", "v_cache", "q_rope")
                   for o in fused.ops)
    before, after = _replay(plain.ops), _replay(fused.ops)
    for o in fused.ops:
        if o.kind == "rope_kv":
            layer = o.label.split(".")[0]
            assert after[o.label] == [before[f"{layer}.q_rope"][0], "rope angles", "<input>"]
            assert (o.args["kc"].state, o.args["vc"].state) == (f"kv.{layer}.k", f"kv.{layer}.v")
        else:
            assert after[o.label] == before[o.label], o.label   # the attention's q included


def test_every_smollm2_verify_layer_is_fused_on_the_split_outputs(smol_verify):
    cfg, plain = smol_verify
    fused, n = fuse_rope(plain, cfg)
    assert n == cfg.layers and len(plain.ops) - len(fused.ops) == cfg.layers
    assert not any(o.label.split(".")[-1] in ("k_rope_cache", "q_rope") for o in fused.ops)
    before, after = _replay(plain.ops), _replay(fused.ops)
    for o in fused.ops:
        if o.kind == "rope_kv":
            layer = o.label.split(".")[0]
            qkv = f"{layer}.self_attn.qkv_split"
            assert "qkv" not in o.args
            assert after[o.label] == [qkv, qkv, qkv, "rope angles", "<input>"]
            assert before[f"{layer}.q_rope"][0] == qkv
            assert (o.args["kc"].state, o.args["vc"].state) == (f"kv.{layer}.k", f"kv.{layer}.v")
        else:
            assert after[o.label] == before[o.label], o.label


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return _decode("qwen3", tmp_path_factory.mktemp("mined"))


def test_qwen3_decode_rope_with_the_qk_norm_is_fused_with_its_weights(qwen3):
    cfg, plain = qwen3
    fused, n = fuse_rope(plain, cfg)
    assert n == cfg.layers and len(plain.ops) - len(fused.ops) == 2 * cfg.layers
    before, after = _replay(plain.ops), _replay(fused.ops)
    for o in fused.ops:
        if o.kind != "rope_kv":
            assert after[o.label] == before[o.label], o.label
            continue
        layer = o.label.split(".")[0]
        i = layer[1:]
        assert (o.args["q_w"].buf, o.args["k_w"].buf) == (
            f"model.layers.{i}.self_attn.q_norm.weight",
            f"model.layers.{i}.self_attn.k_norm.weight")
        assert after[o.label] == [before[f"{layer}.q_rope"][0], "rope angles", "<input>"]


@pytest.fixture(scope="module")
def qwen3_verify(tmp_path_factory):
    return _decode("qwen3", tmp_path_factory.mktemp("mined"), "verify")


def test_qwen3_verify_six_kernels_a_layer_become_one(qwen3_verify):
    cfg, plain = qwen3_verify
    fused, n = fuse_rope(plain, cfg)
    assert n == cfg.layers and len(plain.ops) - len(fused.ops) == 5 * cfg.layers
    gone = ("q_var", "k_var", "q_rope_sin", "k_rope_sin", "k_rope_cache", "q_rope")
    assert not any(o.label.split(".")[-1] in gone for o in fused.ops)
    before, after = _replay(plain.ops), _replay(fused.ops)
    for o in fused.ops:
        if o.kind != "rope_kv":
            assert after[o.label] == before[o.label], o.label   # the attention reads roped q
            continue
        layer = o.label.split(".")[0]
        qkv = f"{layer}.self_attn.qkv_split"
        assert after[o.label] == [qkv, qkv, qkv, "rope angles", "<input>"]
        assert o.args["out"] == o.args["q"]                  # in place, as the q cos half
        assert o.args["q_w"].buf == f"model.layers.{layer[1:]}.self_attn.q_norm.weight"


def _qwen3_verify_altered(prog, label: str, fn):
    return replace(prog, ops=[fn(copy.copy(o)) if o.label == label else o for o in prog.ops])


def test_qwen3_verify_facts_refuse_an_altered_program(qwen3_verify):
    cfg, plain = qwen3_verify

    def out_of(label):
        return next(r for d, r in next(o for o in plain.ops if o.label == label).ptrs.values()
                    if d == "out")
    qv, kv = out_of("L3.q_var"), out_of("L3.k_var")

    def other_var(o):        # the q cos half reads the k variance
        o.ptrs = {p: (d, kv if r == qv else r) for p, (d, r) in o.ptrs.items()}
        return o
    with pytest.raises(WiringError, match=r"L3.q_rope.*reads .*not .*the q/k norm \+ rope chain"):
        fuse_rope(_qwen3_verify_altered(plain, "L3.q_rope", other_var), cfg)
    # a later op reads a temporary the fusion no longer computes
    at = next(i for i, o in enumerate(plain.ops) if o.label == "L3.attn")
    var = qv
    spy = Op("gemm", "L3.spy", None, args={"a": var, "w": Ref(buf="model.x.weight"),
                                          "c": Ref(buf="verify.spy"), "n": 16, "k": 32})
    with pytest.raises(WiringError, match=rf"L3.spy: reads `{var.buf}`, a temporary"):
        fuse_rope(replace(plain, ops=[*plain.ops[:at], spy, *plain.ops[at:]]), cfg)
    # a norm weight of another layer
    def other_weight(o):
        o.ptrs = {p: (d, Ref(buf="model.layers.4.self_attn.k_norm.weight") if r.buf and
                      "k_norm" in r.buf else r) for p, (d, r) in o.ptrs.items()}
        return o
    with pytest.raises(WiringError, match=r"L3.k_rope_sin.*reads .*model.layers.4"):
        fuse_rope(_qwen3_verify_altered(plain, "L3.k_rope_sin", other_weight), cfg)


def test_qwen3_facts_refuse_an_altered_program(qwen3):
    cfg, plain = qwen3
    p = _ptr(qwen3, "L3.k_rope_cache", lambda d, r: r.buf and "k_norm" in r.buf)
    _, prog = _altered(qwen3, "L3.k_rope_cache",
                       ptr=(p, ("in", Ref(buf="model.layers.4.self_attn.k_norm.weight"))))
    with pytest.raises(WiringError, match=r"reads the weights \['model.layers.4.self_attn.k_norm"
                                          r".weight'\], not `model.layers.3.self_attn.k_norm"):
        fuse_rope(prog, cfg)
    # a norm in the V write (or anything but a copy) is not the kernel's
    _, prog = _altered(qwen3, "L3.v_cache", name="triton_poi_fused_index_copy_mul_rsqrt_4")
    with pytest.raises(WiringError, match=r"fuses ATen ops beyond a rotate-half rope and a "
                                          r"cache copy \(rsqrt\)"):
        fuse_rope(prog, cfg)


def test_aten_ops_of_the_captured_names():
    k = "triton_poi_fused__to_copy__unsafe_view_add_bmm_cat_cos_index_copy_mul_neg_sin_slice_transpose_unsqueeze_view_2"
    assert aten_ops(k) == {"to_copy", "unsafe_view", "add", "bmm", "cat", "cos", "index_copy",
                           "mul", "neg", "sin", "slice", "transpose", "unsqueeze", "view"}
    assert aten_ops(k) <= ROPE_OPS
    assert "rsqrt" in aten_ops("triton_poi_fused__to_copy_add_mean_mul_pow_rsqrt_0")
    assert aten_ops("kern_gemv_bf16") == set()


def _altered(smol, label: str, **change):
    """The decode program with op ``label``'s pointer/site changed (``ptr=(param, (dir, ref))``
    or ``name=`` for its kernel name)."""
    cfg, plain = smol
    ops = []
    for o in plain.ops:
        if o.label == label:
            o = copy.copy(o)
            if "ptr" in change:
                p, v = change["ptr"]
                o.ptrs = {**o.ptrs, p: v}
            if "name" in change:
                o.site = copy.copy(o.site)
                o.site.info = msgspec.structs.replace(o.site.info, name=change["name"])
        ops.append(o)
    return cfg, replace(plain, ops=ops)


def _ptr(smol, label: str, pred) -> int:
    o = next(o for o in smol[1].ops if o.label == label)
    return next(p for p, (d, r) in o.ptrs.items() if pred(d, r))


@pytest.mark.parametrize("case, match", [
    ("v_offset", r"reads v at byte 1664 of `decode.L3.qkv_proj.out`, not at 1536"),
    ("k_state", r"writes `kv.L4.k` / `kv.L3.v`, not the layer's K/V states"),
    ("angles", r"k rope reads other angles than q rope"),
    ("norm", r"fuses ATen ops beyond a rotate-half rope and a cache copy \(mean, pow, rsqrt\)"),
    ("slots", r"the cache write does not read `slots`"),
])
def test_each_fact_refuses_an_altered_program(smol, case, match):
    if case == "v_offset":
        p = _ptr(smol, "L3.v_cache", lambda d, r: r.buf == "decode.L3.qkv_proj.out")
        cfg, prog = _altered(smol, "L3.v_cache",
                             ptr=(p, ("in", Ref(buf="decode.L3.qkv_proj.out", offset=1664))))
    elif case == "k_state":
        p = _ptr(smol, "L3.k_rope_cache", lambda d, r: r.state is not None)
        cfg, prog = _altered(smol, "L3.k_rope_cache", ptr=(p, ("inout", Ref(state="kv.L4.k"))))
    elif case == "angles":
        p = _ptr(smol, "L3.k_rope_cache", lambda d, r: r.buf == "decode.rope.angles")
        cfg, prog = _altered(smol, "L3.k_rope_cache",
                             ptr=(p, ("in", Ref(buf="decode.rope.angles", offset=4))))
    elif case == "slots":
        p = _ptr(smol, "L3.v_cache", lambda d, r: r.buf == "slots")
        cfg, prog = _altered(smol, "L3.v_cache", ptr=(p, ("in", Ref(buf="positions"))))
    else:
        cfg, prog = _altered(smol, "L3.q_rope",
                             name="triton_poi_fused__to_copy_cos_mean_mul_pow_rsqrt_sin_4")
    with pytest.raises(WiringError, match=match):
        fuse_rope(prog, cfg)


def _swap_kv_ptrs(prog, label: str):
    """``label``'s k and v inputs exchanged with a q buffer: the rope reads another buffer."""
    o = next(o for o in prog.ops if o.label == label)
    p = next(p for p, (d, r) in o.ptrs.items() if r.buf and r.buf.endswith("k_proj.out"))
    q = next(r for d, r in next(x for x in prog.ops if x.label == label.replace(
        "k_rope_cache", "q_rope")).ptrs.values() if r.buf and r.buf.endswith("q_proj.out"))
    return p, ("in", q)


def test_verify_facts_refuse_an_altered_program(smol_verify):
    cfg, plain = smol_verify
    p, v = _swap_kv_ptrs(plain, "L3.k_rope_cache")
    _, prog = _altered(smol_verify, "L3.k_rope_cache", ptr=(p, v))
    with pytest.raises(WiringError, match=r"the rope kernels do not read exactly q, k, v of "
                                          r"`L3.self_attn.qkv_split`"):
        fuse_rope(prog, cfg)
    # something between the q/k/v GEMV and the rope kernels overwrites the k part
    at = next(i for i, o in enumerate(plain.ops) if o.label == "L3.k_rope_cache")
    split = next(o for o in plain.ops if o.label == "L3.self_attn.qkv_split")
    clobber = Op("gemm", "L3.clobber", None, args={"a": split.args["a"], "w": split.args["w"],
                                                  "c": split.args["c1"], "n": 192, "k": 576})
    with pytest.raises(WiringError, match=rf"L3.clobber: writes `{split.args['c1'].buf}` "
                                          rf"between `L3.self_attn.qkv_split`"):
        fuse_rope(replace(plain, ops=[*plain.ops[:at], clobber, *plain.ops[at:]]), cfg)
    # the q/k/v GEMV's parts in another order (k rows first) is not q | k | v
    ops = [replace(o, args={**o.args, "n0": 192, "n1": 576}) if o is split else o
           for o in plain.ops]
    with pytest.raises(WiringError, match=r"n 192/576/192 from weight row 0; want 576/192/192"):
        fuse_rope(replace(plain, ops=ops), cfg)
