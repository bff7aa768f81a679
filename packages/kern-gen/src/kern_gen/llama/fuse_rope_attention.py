"""A decode layer's rope + K/V cache writes folded into its attention (``kern-gen --attention
cluster-rope``; kernels/attn_decode_cluster.cu, ABI.md 3a‴).

Why: in the decode step the rope + K/V launch (:mod:`.fuse_rope`) sits on the critical path
between the qkv GEMV and the attention, 2.5-3.3 µs a layer of the span (kern-run bench
--ablate, H200: SmolLM2 0.076 ms, the Qwen3-4B shape 0.120 ms a step).  The cluster attention
can do its work: every block rotates its query heads itself, and the block whose keys hold the
row's new key rotates that key, stores K and V to the cache and attends to them from shared
memory, with the arithmetic of the kernels it replaces (rope_core.cuh: the same bits, the GPU
test checks it).  Measured (kern-run bench, H100, PDL on, session 22): SmolLM2 0.640 -> 0.594
ms/token, the Qwen3-4B shape 3.582 -> 3.520, tokens identical.

The fold is made only where it is proved on the IR, per layer of ``decode`` (the one-row
program: one sequence per row, so no row reads another row's new key):

- a ``rope_kv`` op of the merged qkv layout (:data:`.own_rope.ROPE_KV`'s ``qkv`` or
  ``norm``) is immediately followed by an ``attention`` op that reads its rotated q (the same
  buffer, byte 0) and the K and V states it writes;
- no later op reads that rotated q: the attention writes its output over it (the capture's
  memory plan reuses buffers), or the first later op to touch the buffer only writes it.

Layers that do not match keep their two launches; :func:`fold` reports how many folded.
"""

from __future__ import annotations

from dataclasses import replace

from .ir import Op, Program, Ref, check_dataflow, reads, used_buffers, writes

PROGRAMS = frozenset({"decode"})
"""The programs whose layers are folded: one row per sequence (``verify`` rows are one
sequence's consecutive positions: row t must see the keys rows < t write in the same launch,
which the per-row cluster cannot)."""


def fold(prog: Program) -> tuple[Program, int]:
    """(``prog`` with every provable layer's rope + attention pair as one ``rope_attention``
    op, layers folded)."""
    if prog.name not in PROGRAMS:
        return prog, 0
    ops, out, j, folded = prog.ops, [], 0, 0
    while j < len(ops):
        pair = _pair(ops, j)
        if pair is None:
            out.append(ops[j])
            j += 1
            continue
        rope, attn = pair
        a = rope.args
        out.append(Op("rope_attention", f"{attn.label}.rope", rope.site, args={
            "qkv": a["qkv"], **{w: a[w] for w in ("q_w", "k_w") if w in a},
            "angles": a["angles"], "slots": a["slots"], "kc": a["kc"], "vc": a["vc"],
            "out": attn.args["out"]}))
        folded += 1
        j += 2
    if not folded:
        return prog, 0
    check_dataflow(prog.name, out)
    used = used_buffers(out)
    return replace(prog, ops=out, bufs={k: b for k, b in prog.bufs.items() if k in used}), folded


def _pair(ops: list[Op], j: int) -> tuple[Op, Op] | None:
    """(rope_kv, attention) at ``j`` if foldable (the module's conditions); else None."""
    if j + 1 >= len(ops) or ops[j].kind != "rope_kv" or ops[j + 1].kind != "attention":
        return None
    rope, attn = ops[j], ops[j + 1]
    q: Ref = rope.args["out"]
    if "qkv" not in rope.args or q.offset != 0:
        return None
    if (attn.args["q"], attn.args["k"], attn.args["v"]) != (q, rope.args["kc"],
                                                            rope.args["vc"]):
        return None
    return (rope, attn) if _dead_after(ops, j + 1, q) else None


def _dead_after(ops: list[Op], k: int, q: Ref) -> bool:
    """Is the rotated q in ``q.buf`` dead after op ``k`` (the attention)?  The capture's
    memory plan reuses buffers (the attention writes its output over q), so it is dead when
    op ``k`` overwrites it or the first later op to touch the buffer writes without
    reading it."""
    if ops[k].args["out"] == q:
        return True
    for o in ops[k + 1:]:
        if any(r.buf == q.buf for r in reads(o)):
            return False
        if any(r.buf == q.buf for _, r in writes(o)):
            return True
    return True
