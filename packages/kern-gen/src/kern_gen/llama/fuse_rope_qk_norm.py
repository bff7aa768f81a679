"""Qwen3's dynamic-graph rope with the q/k RMSNorm in one launch: a layer's six captured kernels
of ``verify`` become one own ``kern_rope_kv3_norm_bf16`` (``kernels/rope_kv_norm.cu``, ABI.md
3e′).

Why: the Qwen3-shape DSpark round is bound by verify's launches (issue 15: 473 dispatches
against decode's 293).  Per layer the prefill graph computes, between the q/k/v GEMV and the
attention (:mod:`.qwen3`): q variance, q sin half (``rotate_half(norm(q))·sin`` into a bf16
temporary), k variance, k sin half, k cos half + K/V writes, q cos half (in place on q).  The
own kernel computes the same normed rope per head in one pass, in f32, without rounding the
sin half to bf16 first (the one-token graph's arithmetic: verify then agrees with decode).

Proved on the IR before the swap (:class:`~.errors.WiringError` otherwise), for the six ops of
one layer (only the own angle kernel may sit between them):

- each kernel's Inductor name lists only rope, cache-copy and norm ATen ops;
- they read exactly what the chain needs: the variances read q / k (``c0`` / ``c1`` of the
  last ``gemm_split`` before them, ``n`` = ``H·D``, ``KV·D``, ``KV·D`` from weight row 0), the
  sin halves q / k, the layer's ``q_norm`` / ``k_norm`` weight, their variance and the angles;
  the k cos half also ``slots``, its sin half and v (``c2``) and writes the layer's K and V
  states; the q cos half updates q in place from its weight, variance, angles and sin half;
- the temporaries (variances, sin halves) are read by nobody after the chain until written
  anew, and nothing between the GEMV and the chain writes q, k or v.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import rope_facts as RF
from .errors import WiringError
from .ir import SLOTS, Op, Program, Ref, op_where, reads, writes

if TYPE_CHECKING:
    from .config import ModelConfig

PARTS = ("q_var", "q_rope_sin", "k_var", "k_rope_sin", "k_rope_cache", "q_rope")


def group(ops: list[Op], j: int) -> list[int] | None:
    """Indices of one layer's six kernels from ``j`` on (``ops[j]`` the first of them; only
    an ``angles`` op may be interleaved), or None."""
    first = ops[j]
    layer, _, part = first.label.partition(".")
    if first.kind != "mined" or part not in PARTS:
        return None
    found: dict[str, int] = {}
    for t in range(j, min(len(ops), j + len(PARTS) + 1)):
        o = ops[t]
        lay, _, p = o.label.partition(".")
        if o.kind == "angles":
            continue
        if o.kind != "mined" or lay != layer or p not in PARTS or p in found:
            break
        found[p] = t
        if len(found) == len(PARTS):
            return sorted(found.values())
    return None


def fused(prog: Program, ops: list[Op], idx: list[int], cfg: ModelConfig) -> Op:
    """The six kernels at ``idx`` as one ``rope_kv`` op (module docstring)."""
    H, KV, D = cfg.heads, cfg.kv_heads, cfg.head_dim
    g = {ops[t].label.partition(".")[2]: ops[t] for t in idx}
    layer = ops[idx[0]].label.partition(".")[0]
    RF.only_rope_ops(prog, tuple(g.values()), RF.NORM_OPS)
    split = next((t for t in range(idx[0] - 1, -1, -1) if ops[t].kind == "gemm_split"), None)
    if split is None:
        raise WiringError(f"{RF.at(prog, g['q_var'])}: no fused q/k/v GEMV (`gemm_split`) "
                          f"before the rope kernels")
    a = ops[split].args
    q, k, v = a["c0"], a["c1"], a["c2"]
    if (a["n0"], a["n1"], a["n2"]) != (H * D, KV * D, KV * D) or a["w"].offset:
        raise WiringError(f"{RF.at(prog, g['q_var'])}: `{ops[split].label}` writes n "
                          f"{a['n0']}/{a['n1']}/{a['n2']} from weight row "
                          f"{a['w'].offset // (2 * a['k'])}, not q | k | v "
                          f"({H * D}/{KV * D}/{KV * D} from row 0)")
    # the norms of the model whose q/k/v weight the GEMV reads (the target's or a draft's)
    stem = a["w"].buf.removesuffix(".qkv_proj.weight") if a["w"].buf else ""
    if not stem.endswith(f"layers.{layer[1:]}.self_attn"):
        raise WiringError(f"{RF.at(prog, g['q_var'])}: `{ops[split].label}` reads "
                          f"`{a['w'].buf}`, not layer {layer[1:]}'s merged qkv_proj weight")
    qw, kw = Ref(buf=f"{stem}.q_norm.weight"), Ref(buf=f"{stem}.k_norm.weight")
    qv, kv_ = _out(prog, g["q_var"]), _out(prog, g["k_var"])
    qs, ks = _out(prog, g["q_rope_sin"]), _out(prog, g["k_rope_sin"])
    angles = [r for r in reads(g["q_rope_sin"]) if r not in (qw, q, qv)]
    if len(angles) != 1:
        raise WiringError(f"{RF.at(prog, g['q_rope_sin'])}: reads {reads(g['q_rope_sin'])}, "
                          f"not q, `{qw.buf}`, its variance and the angles")
    ang = angles[0]
    want = {"q_var": {q}, "k_var": {k}, "q_rope_sin": {qw, q, qv, ang},
            "k_rope_sin": {kw, k, kv_, ang}, "k_rope_cache": {SLOTS, kw, k, kv_, ang, ks, v},
            "q_rope": {q, qw, qv, ang, qs}}
    for part, refs in want.items():
        got = {r for r in reads(g[part]) if r.state is None}
        if got != refs:
            raise WiringError(f"{RF.at(prog, g[part])}: reads "
                              f"{sorted(r.buf or '' for r in got)}, not "
                              f"{sorted(r.buf or '' for r in refs)} (the q/k norm + rope chain "
                              f"on `{ops[split].label}`'s outputs)")
    RF.angles_from_own_kernel(prog, ops, idx[-1], g["k_rope_cache"],
                              {"in": reads(g["k_rope_cache"])}, g["q_rope_sin"], ang)
    states = [r for d, r in writes(g["k_rope_cache"]) if r.state]
    if len(states) != 2:
        raise WiringError(f"{RF.at(prog, g['k_rope_cache'])}: writes {len(states)} states, "
                          f"not the layer's K and V")
    RF.layer_states(prog, g["k_rope_cache"], layer, *states)
    if [r for _, r in writes(g["q_rope"])] != [q]:
        raise WiringError(f"{RF.at(prog, g['q_rope'])}: writes "
                          f"{[r.buf for _, r in writes(g['q_rope'])]}, not q in place")
    _untouched(prog, ops, split, idx, {q.buf, k.buf, v.buf})
    _unread_after(prog, ops, idx[-1], [qv, kv_, qs, ks])
    return Op("rope_kv", f"{layer}.rope_kv", g["q_rope"].site,
              args={"q": q, "k": k, "v": v, "q_w": qw, "k_w": kw, "angles": ang,
                    "slots": SLOTS, "out": q, "kc": states[0], "vc": states[1]})


def _out(prog: Program, o: Op) -> Ref:
    outs = [r for d, r in writes(o) if d == "out"]
    if len(outs) != 1 or outs[0].state is not None:
        raise WiringError(f"{op_where(prog.name, o)}: writes {outs}, not one temporary")
    return outs[0]


def _untouched(prog: Program, ops: list[Op], split: int, idx: list[int], bufs: set[str]) -> None:
    """Between the GEMV and the chain's end only the chain writes q, k, v."""
    for t in range(split + 1, idx[-1]):
        if t in idx:
            continue
        hit = {r.buf for _, r in writes(ops[t])} & bufs
        if hit:
            raise WiringError(f"{op_where(prog.name, ops[t])}: writes `{sorted(hit)[0]}` between "
                              f"`{ops[split].label}` and the rope kernels")


def _unread_after(prog: Program, ops: list[Op], end: int, temps: list[Ref]) -> None:
    """No op after the chain reads a temporary before it is written anew: they are no
    longer computed."""
    for r in temps:
        for o in ops[end + 1:]:
            if r.buf in [x.buf for x in reads(o)]:
                raise WiringError(f"{op_where(prog.name, o)}: reads `{r.buf}`, a temporary of the "
                                  f"fused q/k norm + rope chain")
            if r.buf in [x.buf for d, x in writes(o) if d == "out"]:
                break
