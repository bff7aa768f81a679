"""The cluster decode attention (issue 16; kernels/attn_decode_cluster.cu, ABI.md 3a″ / 3a‴):
``--attention cluster`` (decode's attention one launch whose 8 key splits of a (row, kv head)
merge in a thread-block cluster) and ``--attention cluster-rope`` (the default: each decode
layer's rope + K/V launch folded into it, :mod:`kern_gen.llama.fuse_rope_attention`).

Against the committed examples (cluster-rope): ``--attention cluster`` differs only in decode,
where every ``rope_attention`` dispatch is the layer's ``rope_kv`` + ``attention`` pair again
(same arguments); ``--attention split`` differs from ``cluster`` only in ``decode.attention``'s
impl.  Each step follows the ABI; each README says which; a model with more than 4 query heads
per kv head is refused; the fold pass leaves what it cannot prove alone."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import kern_manifest
import pytest
from kg_own import own_committed
from kern_mine import encode_json, mine

from kern_gen.llama import WiringError, generate
from kern_gen.llama import attn_cluster as AC
from kern_gen.llama import own
from kern_gen.llama.command import PRESETS
from kern_gen.llama.fuse_rope_attention import fold
from kern_gen.llama.ir import Buf, Op, Program, Ref

ROOT = Path(__file__).resolve().parents[3]
ABI = (ROOT / "packages/kern-gen/kernels/ABI.md").read_text()
SRC = (ROOT / "packages/kern-gen/kernels/attn_decode_cluster.cu").read_text()
CORE = (ROOT / "packages/kern-gen/kernels/attn_core.cuh").read_text()


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[str, dict]:
    """Per preset: {"split", "cluster": manifest dict, "example": the committed one,
    "readme": {variant: text}, "sha": the committed cluster cubin's sha256, "cfg"}."""
    out = {}
    for name in PRESETS:
        cap, cfg, ex, label = (ROOT / p if i < 3 else p for i, p in enumerate(PRESETS[name]))
        mined = tmp_path_factory.mktemp("mined") / f"{name}.json"
        mined.write_bytes(encode_json(mine(cap)))
        got, readme = {}, {}
        for att in ("split", "cluster"):
            res = generate(cap, cfg, mined=mined, label=label, attention=att,
                           own_cubins=own_committed(ex),
                           command=f"uv run --frozen kern-gen {name} --attention {att}")
            diags = kern_manifest.verify(kern_manifest.decode(res.manifest))
            assert not diags, kern_manifest.render_human(diags)
            got[att], readme[att] = json.loads(res.manifest), res.readme.decode()
            got[att + "_cubins"] = set(res.cubins)
        readme["cluster-rope"] = (ex / "README.md").read_text()
        out[name] = {**got, "example": json.loads((ex / "manifest.json").read_text()),
                     "readme": readme, "cfg": json.loads(cfg.read_text()),
                     "sha": hashlib.sha256((ex / "kernels/attn_decode_cluster.cubin")
                                           .read_bytes()).hexdigest(),
                     "cubins": {p.name for p in (ex / "kernels").glob("*.cubin")}}
    return out


def _heads(cfg: dict) -> tuple[int, int, int]:
    d = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return d, cfg["num_attention_heads"], cfg["num_key_value_heads"]


@pytest.mark.parametrize("name", list(PRESETS))
def test_split_and_cluster_differ_in_decode_attention_only(variants, name):
    a, b = variants[name]["split"], variants[name]["cluster"]
    for key in ("programs", "symbols", "states", "buffers"):
        assert json.dumps(a[key]) == json.dumps(b[key]), key
    differ = {k for k in a["kernels"] if a["kernels"][k] != b["kernels"][k]}
    assert list(a["kernels"]) == list(b["kernels"]) and differ == {"decode.attention"}
    assert a["kernels"]["decode.attention"]["params"] == AC.DECODE_IFACE == \
        b["kernels"]["decode.attention"]["params"]
    assert variants[name]["cluster_cubins"] == variants[name]["split_cubins"] | {
        "attn_decode_cluster.cubin"}


@pytest.mark.parametrize("name", list(PRESETS))
def test_cluster_step_follows_the_abi(variants, name):
    v = variants[name]
    D, H, KVH = _heads(v["cfg"])
    kern = v["cluster"]["kernels"]["decode.attention"]
    assert "scratch" not in kern["impl"]
    (st,) = kern["impl"]["steps"]
    assert (st["symbol"], st["cubin"], st["sha256"], st["pdl"]) == (
        f"kern_attn_decode_cluster_bf16_d{D}", "attn_decode_cluster.cubin", v["sha"], True)
    assert st["params"] == AC.CLUSTER_PARAMS
    assert st["block"] == [256, 1, 1] and st["grid"] == [KVH, 8, 1]
    args = st["args"]
    assert args[:6] == [{"arg": i} for i in range(6)]
    assert args[11:14] == [{"i32": H}, {"i32": KVH}, {"f32": 1.0 / math.sqrt(D)}]
    # q_row_stride, the cache strides and the table's row stride as the pair's partial's
    p_args = v["split"]["kernels"]["decode.attention"]["impl"]["steps"][0]["args"]
    assert args[6:11] == p_args[7:12] and args[14] == p_args[16]


@pytest.mark.parametrize("name", list(PRESETS))
def test_the_default_folds_every_decode_layers_rope(variants, name):
    """Examples (cluster-rope) against cluster: the other programs and every other decode
    dispatch unchanged; each decode layer's rope_kv + attention pair is one rope_attention
    dispatch passing the pair's arguments (rope's inputs and states, the attention's out)."""
    v = variants[name]
    a, b = v["cluster"], v["example"]
    for prog in a["programs"]:
        if prog != "decode":
            assert a["programs"][prog] == b["programs"][prog], prog
    pa, pb = a["programs"]["decode"]["dispatches"], b["programs"]["decode"]["dispatches"]
    i = folded = 0
    for d in pb:
        if d["kernel"] != "decode.rope_attention":
            assert d == pa[i], d["label"]
            i += 1
            continue
        rope, attn = pa[i], pa[i + 1]
        assert (rope["kernel"], attn["kernel"]) == ("decode.rope_kv", "decode.attention")
        assert d["label"] == attn["label"] + ".rope"
        # rope: (qkv, [q_w, k_w,] angles, slots, q, kc, vc, tokens); attention: (q, kc, vc,
        # kv_lens, block_table, out)
        assert d["args"] == [*rope["args"][:-4], *rope["args"][-3:-1], *attn["args"][3:]]
        i += 2
        folded += 1
    assert i == len(pa) and folded == v["cfg"]["num_hidden_layers"]
    assert "decode.rope_kv" not in b["kernels"] and "decode.attention" not in b["kernels"]
    assert v["cubins"] == v["cluster_cubins"]


@pytest.mark.parametrize("name", list(PRESETS))
def test_folded_step_follows_the_abi(variants, name):
    v = variants[name]
    D, H, KVH = _heads(v["cfg"])
    norm = name == "qwen3"
    kern = v["example"]["kernels"]["decode.rope_attention"]
    assert kern["params"] == AC.ROPE_IFACE[norm]
    (st,) = kern["impl"]["steps"]
    assert (st["symbol"], st["cubin"], st["sha256"], st["pdl"]) == (
        f"kern_attn_decode_cluster_rope{'_norm' if norm else ''}_bf16_d{D}",
        "attn_decode_cluster.cubin", v["sha"], True)
    assert st["params"] == AC.ROPE_PARAMS[norm]
    assert st["block"] == [256, 1, 1] and st["grid"] == [KVH, 8, 1]
    n = len(AC.ROPE_IFACE[norm])
    args = st["args"]
    assert args[:n] == [{"arg": i} for i in range(n)] and args[n] == {"i32": 1}
    cl = v["cluster"]["kernels"]["decode.attention"]["impl"]["steps"][0]["args"]
    assert args[n + 1:n + 9] == cl[7:15]             # the cluster kernel's tail
    rope = v["cluster"]["kernels"]["decode.rope_kv"]["impl"]["steps"][0]["args"]
    assert args[n + 9:] == rope[-2:] if norm else args[n + 9:] == rope[-1:]   # cache_len, eps


def test_readmes_name_the_choice(variants):
    for name, v in variants.items():
        r = v["readme"]
        assert "- **Decode attention** `--attention cluster-rope` (the default): " in \
            r["cluster-rope"]
        assert f"in {v['cfg']['num_hidden_layers']} layers the rope and K/V cache writes are " \
               "folded into it" in r["cluster-rope"]
        for att in ("split", "cluster"):
            assert f"- **Decode attention** `--attention {att}`: " in r[att]
            assert f"kern-gen {name} --attention {att}" in r[att]


def test_abi_documents_the_launches():
    """ABI.md 3a″ / 3a‴ state the steps' parameter lists, the cubin row names every symbol;
    the kernel's compile-time constants equal the generator's."""
    for params in (AC.CLUSTER_PARAMS, *AC.ROPE_PARAMS.values(), *AC.ROPE_IFACE.values()):
        assert "`" + json.dumps(params) + "`" in ABI
    row = next(line for line in ABI.splitlines() if line.startswith("| `attn_decode_cluster"))
    assert set(re.findall(r"`(kern_\w+)`", row)) == {
        f"kern_attn_decode_cluster{v}_bf16_d{d}" for v in ("", "_rope", "_rope_norm")
        for d in (64, 128)}
    assert "constexpr int kC = KERN_CLUSTER_SPLITS;" in SRC     # the build's default:
    assert re.search(r"#define KERN_CLUSTER_SPLITS (\d+)", SRC).group(1) == \
        str(AC.CLUSTER_SPLITS)
    assert re.search(r"constexpr int kMaxG = (\d+);", CORE).group(1) == \
        str(AC.CLUSTER_MAX_GROUP)                   # attn_core.cuh, which the kernel includes
    assert '#include "attn_core.cuh"' in SRC
    for d in (64, 128):
        assert re.search(rf"#define KERN_CLUSTER_THREADS_D{d} (\d+)", SRC).group(1) == \
            str(AC.CLUSTER_THREADS)


@pytest.mark.parametrize("attention", ["cluster", "cluster-rope"])
def test_more_than_four_query_heads_per_kv_head_is_refused(attention):
    """The kernel holds G <= 4 query heads of a kv head: SmolLM2's config with 1 kv head (G =
    9) is refused with the fix named (the emitters read only the config before refusing)."""
    from kern_gen.llama import config as C
    spec = _ConfigOnly(replace(C.load(ROOT / PRESETS["llama"][1]), kv_heads=1))
    with pytest.raises(WiringError, match=rf"--attention {attention} holds at most 4 query "
                                          r"heads per kv head; the model has 9 query / 1 kv "
                                          r"heads: use --attention split"):
        if attention == "cluster":
            own._cluster(spec, "decode", 1, [])
        else:
            AC.rope_attention(spec, "decode", Op("rope_attention", "L0.attn.rope"), 1)


class _ConfigOnly:
    """An assembler stand-in holding the model's config alone."""

    def __init__(self, cfg) -> None:
        self.cfg = cfg


# --- the fold pass on hand-made programs ----------------------------------------------------

def _layer(q_out: str = "q", attn_out: str = "q", between: list[Op] | None = None,
           after: list[Op] | None = None, name: str = "decode") -> Program:
    kc, vc = Ref(state="kv.L0.k"), Ref(state="kv.L0.v")
    ops = [Op("gemm", "L0.qkv", args={"a": Ref(buf="x"), "c": Ref(buf="qkv")}),
           Op("rope_kv", "L0.rope_kv", args={"qkv": Ref(buf="qkv"), "angles": Ref(buf="ang"),
                                             "slots": Ref(buf="slots"), "out": Ref(buf=q_out),
                                             "kc": kc, "vc": vc}),
           *(between or []),
           Op("attention", "L0.attn", args={"q": Ref(buf=q_out), "k": kc, "v": vc,
                                            "out": Ref(buf=attn_out)}),
           *(after or [])]
    bufs = {b: Buf(b, "bf16", 8, "workspace") for b in ("x", "qkv", "ang", "q", "o", "y")}
    return Program(name, 1, [Op("gemm", "x", args={"c": Ref(buf="x")}),
                             Op("angles", "ang", args={"out": Ref(buf="ang")}), *ops], bufs)


def test_fold_replaces_the_pair_and_keeps_everything_else():
    p, n = fold(_layer(after=[Op("gemm", "L0.o", args={"a": Ref(buf="q"),
                                                       "c": Ref(buf="y")})]))
    assert n == 1
    kinds = [o.kind for o in p.ops]
    assert kinds == ["gemm", "angles", "gemm", "rope_attention", "gemm"]
    a = p.ops[3].args
    assert (a["qkv"], a["angles"], a["slots"], a["out"]) == (
        Ref(buf="qkv"), Ref(buf="ang"), Ref(buf="slots"), Ref(buf="q"))


@pytest.mark.parametrize("why, prog", [
    ("not adjacent", _layer(between=[Op("gemm", "noise", args={"c": Ref(buf="y")})])),
    ("rotated q read later", _layer(attn_out="o", after=[
        Op("gemm", "L0.o", args={"a": Ref(buf="q"), "c": Ref(buf="y")})])),
    ("not the decode program", _layer(name="verify")),
])
def test_fold_leaves_what_it_cannot_prove(why, prog):
    assert fold(prog) == (prog, 0), why


def test_a_rotated_q_overwritten_before_any_read_is_dead():
    p, n = fold(_layer(attn_out="o", after=[
        Op("gemm", "w", args={"a": Ref(buf="x"), "c": Ref(buf="q")}),
        Op("gemm", "r", args={"a": Ref(buf="q"), "c": Ref(buf="y")})]))
    assert n == 1 and p.ops[3].args["out"] == Ref(buf="o")


def test_without_the_rope_launch_nothing_is_folded(tmp_path):
    """``--no-fuse`` keeps the captured rope kernels: the default attention has nothing to
    fold, decode runs the cluster kernel beside them, and the README says so."""
    cap, cfg, ex, label = (ROOT / p if i < 3 else p for i, p in enumerate(PRESETS["llama"]))
    res = generate(cap, cfg, label=label, fuse=False, own_cubins=own_committed(ex))
    doc = json.loads(res.manifest)
    assert "decode.rope_attention" not in doc["kernels"]
    (st,) = doc["kernels"]["decode.attention"]["impl"]["steps"]
    assert st["symbol"] == "kern_attn_decode_cluster_bf16_d64"
    assert "no decode layer's rope could be folded into it" in res.readme.decode()
