"""Rope + cache writes in one launch: the few-row programs' captured rope kernels of a layer
become one own launch (``kernels/rope_kv.cu``, ABI.md 3d / 3d′).

Why: a decode step is bound by launches (issue 16).  In the Llama decode graph Inductor
leaves three small kernels per layer between the qkv GEMM and the attention: k rope + K-cache
write, V-cache write, q rope (SmolLM2: 90 of the step's ~305 dispatches).  The own kernel does
the three in one launch with the same arithmetic (rotate-half in f32, one bf16 rounding).

The fusion is made only where it is proved on the IR and the captured kernels' names
(:class:`~.errors.WiringError` otherwise):

- the three are adjacent (nothing runs between them) and are exactly the Llama signature: k
  rope reads ``slots``, the k part of one qkv buffer and the rope angles and writes the
  layer's K state; the V write reads ``slots`` and the v part and writes the V state; q rope
  reads the q part and the same angles and writes one buffer;
- the parts sit where the merged qkv GEMM writes them: q at byte 0, k at ``2·H·D``, v at
  ``2·(H + KV)·D``, of a buffer ``(H + 2·KV)·D`` wide; the angles come from the own angle
  kernel (:func:`~.own_rope.rope_angles`, layout ``[D/2, tokens]``);
- each captured kernel's ATen ops (Inductor names a fused kernel after them) are only the
  rotate-half rope's and the cache copy's: a norm, a scaling or any other op refuses.

The dynamic programs (``verify``, from the prefill graph) have two rope kernels per layer
instead (k rope + K and V writes in one, q rope) reading q, k, v from three buffers, the
outputs of the fused q/k/v GEMV (:mod:`.fuse`'s ``gemm_split``).  They become one
``kern_rope_kv3_bf16`` when, besides the ATen ops and the angles above: the two are adjacent;
the k kernel reads ``slots``, two bf16 buffers and the q rope's angles and writes the layer's
K and V states; the q rope reads one bf16 buffer; and those three buffers are exactly the
``c0``/``c1``/``c2`` (q, k, v: ``n`` = ``H·D``, ``KV·D``, ``KV·D`` over the merged weight from
row 0) of the last ``gemm_split`` before them, which nothing in between writes.  Which of the
k kernel's two inputs is k follows from that GEMM (its rows ``H·D …`` are ``k_proj``'s).

Qwen3's dynamic graph (six kernels a layer with the q/k norm) is :mod:`.fuse_rope_qk_norm`'s.

Qwen3's one-token kernels carry the per-head q/k RMSNorm (the layer's ``q_norm`` / ``k_norm``
weight, :data:`.rope_facts.NORM_OPS`): the same three become one ``kern_rope_kv_norm_bf16``
(ABI.md 3e) with those weights and the config's epsilon (whose f32 bits the wiring found in both
cubins).  :func:`fuse_rope` reports how many layers it fused.  Which index the writes
use is asserted for the captured writers themselves (:mod:`.writers`); the own kernel
writes row ``slots[t]`` of the states with the same stride (``KV·D`` elements a row).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from . import fuse_rope_qk_norm as QK
from . import rope_facts as RF
from .errors import WiringError
from .ir import SLOTS, Op, Program, Ref, check_dataflow, is_weight, used_buffers, writes


if TYPE_CHECKING:
    from .config import ModelConfig

PARTS = ("k_rope_cache", "v_cache", "q_rope")
PARTS_SPLIT = ("k_rope_cache", "q_rope")
def fuse_rope(prog: Program, cfg: ModelConfig) -> tuple[Program, int]:
    """(``prog`` with every provable layer's rope kernels fused, layers fused)."""
    ops, out, fused, j = list(prog.ops), [], 0, 0
    while j < len(ops):
        chain = QK.group(ops, j)
        if chain is not None:               # Qwen3's dynamic graph: six kernels a layer
            out += [ops[t] for t in range(j, chain[-1]) if t not in chain]
            out.append(QK.fused(prog, ops, chain, cfg))
            fused += 1
            j = chain[-1] + 1
            continue
        group = _group(ops, j)
        split = None if group else _group_split(ops, j)
        if group is None and split is None:
            out.append(ops[j])
            j += 1
            continue
        out.append(_fused(prog, ops, j, group, cfg) if group
                   else _fused_split(prog, ops, j, split, cfg))
        fused += 1
        j += 3 if group else 2
    if not fused:
        return prog, 0
    check_dataflow(prog.name, out)
    used = used_buffers(out)
    return replace(prog, ops=out, bufs={k: b for k, b in prog.bufs.items() if k in used}), fused


def _window(ops: list[Op], j: int, parts: tuple[str, ...]) -> dict[str, Op] | None:
    """The ``len(parts)`` adjacent mined ops from ``j`` if they are exactly ``parts`` of one
    layer (any order), by role; else None."""
    window = ops[j:j + len(parts)]
    if len(window) < len(parts) or any(o.kind != "mined" for o in window):
        return None
    found = {o.label.partition(".")[2]: o for o in window}
    layers = {o.label.partition(".")[0] for o in window}
    return found if set(found) == set(parts) and len(layers) == 1 else None


def _group(ops: list[Op], j: int) -> dict[str, Op] | None:
    """The three adjacent rope ops of one layer starting at ``j`` (any order), if the q rope
    has the Llama shape (a read of q, a read of the angles, one output); else None."""
    parts = _window(ops, j, PARTS)
    if parts is None:
        return None
    # Llama: q, angles, out; Qwen3 (:data:`.rope_facts.NORM_OPS`): and the q norm's weight
    shape = tuple(len(parts[p].ptrs) for p in PARTS)
    return parts if shape in ((4, 3, 3), (5, 3, 4)) else None


def _group_split(ops: list[Op], j: int) -> dict[str, Op] | None:
    """The two adjacent rope ops of a dynamic program's layer at ``j`` (k rope + K/V writes,
    q rope; any order), if the q rope has the Llama shape (three pointers); else None."""
    parts = _window(ops, j, PARTS_SPLIT)
    if parts is None or len(parts["q_rope"].ptrs) != 3 or len(parts["k_rope_cache"].ptrs) != 6:
        return None
    return parts


def _fused(prog: Program, ops: list[Op], j: int, g: dict[str, Op], cfg: ModelConfig) -> Op:
    H, KV, D = cfg.heads, cfg.kv_heads, cfg.head_dim
    k, v, q = g["k_rope_cache"], g["v_cache"], g["q_rope"]
    norm = len(q.ptrs) == 4
    RF.only_rope_ops(prog, (k, q), RF.NORM_OPS if norm else frozenset())
    RF.only_rope_ops(prog, (v,))
    layer = q.label.partition(".")[0]
    kin = _sig(prog, k, {"in": 3 + norm, "inout": 1})
    vin = _sig(prog, v, {"in": 2, "inout": 1})
    qin = _sig(prog, q, {"in": 2 + norm, "out": 1})
    for o, sig in ((k, kin), (v, vin)):
        if SLOTS not in sig["in"]:
            raise WiringError(f"{RF.at(prog, o)}: the cache write does not read `slots`")
    weights = _norm_weights(prog, layer, q, qin, k, kin) if norm else {}
    qkv_q = [r for r in qin["in"] if r.buf in prog.bufs and prog.bufs[r.buf].dtype == "bf16"]
    ang = [r for r in qin["in"] if r not in qkv_q and not is_weight(r.buf)]
    if len(qkv_q) != 1 or len(ang) != 1:
        raise WiringError(f"{RF.at(prog, q)}: expected one bf16 q input and one f32 angle "
                          f"input, found {qin['in']}")
    qkv = qkv_q[0].buf
    offs = {"q": 0, "k": 2 * H * D, "v": 2 * (H + KV) * D}
    want = {"q": qkv_q[0], "k": _part(prog, k, kin, qkv), "v": _part(prog, v, vin, qkv)}
    for part, r in want.items():
        if r.offset != offs[part]:
            raise WiringError(f"{RF.at(prog, g[PARTS[('k', 'v', 'q').index(part)]])}: reads "
                              f"{part} at byte {r.offset} of `{qkv}`, not at {offs[part]} "
                              f"(the merged qkv layout q | k | v)")
    if prog.bufs[qkv].width != (H + 2 * KV) * D:
        raise WiringError(f"{RF.at(prog, q)}: `{qkv}` is {prog.bufs[qkv].width} wide, not the "
                          f"merged qkv's {(H + 2 * KV) * D}")
    RF.angles_from_own_kernel(prog, ops, j, k, kin, q, ang[0])
    kst, vst = kin["inout"][0], vin["inout"][0]
    RF.layer_states(prog, k, layer, kst, vst)
    return Op("rope_kv", f"{layer}.rope_kv", q.site,
              args={"qkv": Ref(buf=qkv), **weights, "angles": ang[0], "slots": SLOTS,
                    "out": qin["out"][0], "kc": kst, "vc": vst})


def _norm_weights(prog: Program, layer: str, q: Op, qin: dict[str, list[Ref]], k: Op,
                  kin: dict[str, list[Ref]]) -> dict[str, Ref]:
    """Qwen3: q rope reads the layer's ``q_norm`` weight and k rope its ``k_norm`` weight,
    each once and whole (the wiring asserted them against the sidecar and the epsilon
    literal in both cubins, :mod:`.roles`)."""
    out = {}
    for key, o, sig, name in (("q_w", q, qin, "q_norm"), ("k_w", k, kin, "k_norm")):
        want = f"model.layers.{layer[1:]}.self_attn.{name}.weight"
        ws = [r for r in sig["in"] if is_weight(r.buf)]
        if ws != [Ref(buf=want)]:
            raise WiringError(f"{RF.at(prog, o)}: reads the weights {[r.buf for r in ws]}, not "
                              f"`{want}` alone (the layer's per-head RMSNorm)")
        out[key] = ws[0]
    return out


def _fused_split(prog: Program, ops: list[Op], j: int, g: dict[str, Op],
                 cfg: ModelConfig) -> Op:
    """The dynamic programs' pair (k rope + K/V writes, q rope) as one ``rope_kv`` on the
    q/k/v GEMV's three outputs (module docstring)."""
    H, KV, D = cfg.heads, cfg.kv_heads, cfg.head_dim
    k, q = g["k_rope_cache"], g["q_rope"]
    RF.only_rope_ops(prog, (k, q))
    layer = q.label.partition(".")[0]
    kin = _sig(prog, k, {"in": 4, "inout": 2})
    qin = _sig(prog, q, {"in": 2, "out": 1})
    if SLOTS not in kin["in"]:
        raise WiringError(f"{RF.at(prog, k)}: the cache write does not read `slots`")
    bf16 = [r for r in qin["in"] if r.buf in prog.bufs and prog.bufs[r.buf].dtype == "bf16"]
    ang = [r for r in qin["in"] if r not in bf16]
    if len(bf16) != 1 or len(ang) != 1:
        raise WiringError(f"{RF.at(prog, q)}: expected one bf16 q input and one f32 angle "
                          f"input, found {qin['in']}")
    RF.angles_from_own_kernel(prog, ops, j, k, kin, q, ang[0])
    split = next((t for t in range(j - 1, -1, -1) if ops[t].kind == "gemm_split"), None)
    if split is None:
        raise WiringError(f"{RF.at(prog, q)}: no fused q/k/v GEMV (`gemm_split`) before the "
                          f"rope kernels")
    a = ops[split].args
    q_in, k_in, v_in = a["c0"], a["c1"], a["c2"]
    if ((a["n0"], a["n1"], a["n2"]) != (H * D, KV * D, KV * D) or a["w"].offset
            or bf16[0] != q_in or {k_in, v_in} != {r for r in kin["in"] if r not in
                                                    (SLOTS, ang[0])}):
        raise WiringError(f"{RF.at(prog, q)}: the rope kernels do not read exactly q, k, v of "
                          f"`{ops[split].label}` (n {a['n0']}/{a['n1']}/{a['n2']} from weight "
                          f"row {a['w'].offset // (2 * a['k'])}; want {H * D}/{KV * D}/{KV * D} "
                          f"from row 0)")
    for o in ops[split + 1:j]:
        hit = {r.buf for _, r in writes(o)} & {q_in.buf, k_in.buf, v_in.buf}
        if hit:
            raise WiringError(f"{RF.at(prog, o)}: writes `{sorted(hit)[0]}` between "
                              f"`{ops[split].label}` and the rope kernels")
    kst, vst = kin["inout"]
    RF.layer_states(prog, k, layer, kst, vst)
    return Op("rope_kv", f"{layer}.rope_kv", q.site,
              args={"q": q_in, "k": k_in, "v": v_in, "angles": ang[0], "slots": SLOTS,
                    "out": qin["out"][0], "kc": kst, "vc": vst})


def _sig(prog: Program, o: Op, want: dict[str, int]) -> dict[str, list[Ref]]:
    by: dict[str, list[Ref]] = {"in": [], "out": [], "inout": []}
    for _, (d, r) in sorted(o.ptrs.items()):
        by[d].append(r)
    got = {d: len(rs) for d, rs in by.items() if rs}
    if got != want:
        raise WiringError(f"{RF.at(prog, o)}: pointer directions {got}, not the Llama "
                          f"rope's {want}")
    return by


def _part(prog: Program, o: Op, sig: dict[str, list[Ref]], qkv: str) -> Ref:
    rs = [r for r in sig["in"] if r.buf == qkv]
    if len(rs) != 1:
        raise WiringError(f"{RF.at(prog, o)}: does not read the q rope's qkv buffer `{qkv}` "
                          f"exactly once")
    return rs[0]
