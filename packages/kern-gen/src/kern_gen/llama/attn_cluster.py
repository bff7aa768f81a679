"""The cluster decode attention's dispatches (``kernels/attn_decode_cluster.cu``, ABI.md 3a″ and
3a‴): one launch whose 8 key splits of a (row, kv head) are one thread-block cluster, merged
over distributed shared memory; with the layer's rope and K/V cache writes folded in where
:mod:`.fuse_rope_attention` proved them foldable (``kern-gen --attention cluster-rope``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .errors import WiringError
from .ir import BLOCK_TABLE, KV_LENS, TOK, Op

if TYPE_CHECKING:
    from .assemble import Assembler

DECODE_IFACE = ["in buffer<bf16>", "in ptr", "in ptr", "in buffer<i32>", "in buffer<i32>",
                "out buffer<bf16>"]
"""``(q, k_cache, v_cache, kv_lens, block_table, out)``: the decode attention's interface
(ABI.md 3a, 3a′, 3a″)."""
CLUSTER_SPLITS = 8
"""Blocks of a cluster = key splits of a (row, kv head) (attn_decode_cluster.cu's ``kC``)."""
CLUSTER_THREADS = 256
CLUSTER_MAX_GROUP = 4
"""The most query heads per kv head attn_decode_cluster.cu holds (``kMaxG``)."""
_TAIL = ["i64", "i64", "i64", "i64", "i32", "i32", "f32", "i32"]
"""The cache strides, head counts, scale and table row stride every cluster symbol takes."""
CLUSTER_PARAMS = [*DECODE_IFACE, "i32", *_TAIL]
"""``kern_attn_decode_cluster_bf16_d{D}`` (ABI.md 3a″)."""
ROPE_IFACE = {
    False: ["in buffer<bf16>", "in buffer<f32>", "in buffer<i64>", "inout ptr", "inout ptr",
            "in buffer<i32>", "in buffer<i32>", "out buffer<bf16>"],
    True: ["in buffer<bf16>", "in buffer<bf16>", "in buffer<bf16>", "in buffer<f32>",
           "in buffer<i64>", "inout ptr", "inout ptr", "in buffer<i32>", "in buffer<i32>",
           "out buffer<bf16>"]}
"""By ``norm`` (Qwen3's q/k RMSNorm): ``(qkv, [q_w, k_w,] angles, slots, k_cache, v_cache,
kv_lens, block_table, out)`` of the folded kernel (ABI.md 3a‴)."""
ROPE_PARAMS = {norm: [*iface, "i32", *_TAIL, "i64", *(["f32"] if norm else [])]
               for norm, iface in ROPE_IFACE.items()}
"""``kern_attn_decode_cluster_rope[_norm]_bf16_d{D}``: the interface, then ``tokens``, the
cluster tail, ``cache_len`` and (norm) ``eps``."""


def _check(asm: Assembler, what: str) -> tuple[int, int, int]:
    """(D, query heads, kv heads), refused where the kernel cannot hold the GQA group."""
    cfg = asm.cfg
    D, H, KVH = cfg.head_dim, cfg.heads, cfg.kv_heads
    if H % KVH or H // KVH > CLUSTER_MAX_GROUP:
        raise WiringError(f"--attention {what} holds at most {CLUSTER_MAX_GROUP} query heads "
                          f"per kv head; the model has {H} query / {KVH} kv heads: use "
                          f"--attention split")
    return D, H, KVH


def kv_strides(asm: Assembler) -> list[dict[str, Any]]:
    """The K then V cache's slot and head strides (elements), as every own attention takes
    them."""
    kv = asm.kv
    return [{"i64": kv.slot_stride}, {"i64": kv.head_stride}, {"i64": kv.slot_stride},
            {"i64": kv.head_stride}]


def _tail(asm: Assembler) -> list[dict[str, Any]]:
    D, H, KVH = asm.cfg.head_dim, asm.cfg.heads, asm.cfg.kv_heads
    return [*kv_strides(asm), {"i32": H}, {"i32": KVH}, {"f32": 1.0 / math.sqrt(D)},
            {"i32": asm.kv.table_pages}]


def cluster(asm: Assembler, program: str, rows: Any) -> str:
    """``program``'s attention kernel through ``kern_attn_decode_cluster_bf16_d{D}``."""
    D, _, KVH = _check(asm, "cluster")
    step = asm.own_step(
        "attn_decode_cluster.cubin", f"kern_attn_decode_cluster_bf16_d{D}",
        params=CLUSTER_PARAMS, block=[CLUSTER_THREADS, 1, 1], grid=[KVH, CLUSTER_SPLITS, rows],
        args=[*({"arg": i} for i in range(6)), {"i32": asm.cfg.q_width}, *_tail(asm)])
    return asm.kernel(f"{program}.attention", {"params": DECODE_IFACE,
                                               "impl": {"steps": [step]}},
                      f"own decode attention, {CLUSTER_SPLITS} key splits merged in a "
                      "thread-block cluster (one launch)")


def rope_attention(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """A layer's rope, K/V cache writes and attention (:mod:`.fuse_rope_attention`'s op) as
    one ``kern_attn_decode_cluster_rope[_norm]_bf16_d{D}`` launch."""
    D, _, KVH = _check(asm, "cluster-rope")
    a, kv = op.args, asm.kv
    norm = "q_w" in a
    iface = ROPE_IFACE[norm]
    t = {"sym": "tokens"} if rows == TOK else {"i32": rows}
    symbol = f"kern_attn_decode_cluster_rope{'_norm' if norm else ''}_bf16_d{D}"
    # state_first: the kernel reads kv_lens, the table and old K/V rows before its wait
    # (kernels/attn_decode_cluster.cu); pdl_order checks the launch order
    step = asm.own_step(
        "attn_decode_cluster.cubin", symbol, state_first=True, params=ROPE_PARAMS[norm],
        block=[CLUSTER_THREADS, 1, 1], grid=[KVH, CLUSTER_SPLITS, rows],
        args=[*({"arg": i} for i in range(len(iface))), t, *_tail(asm),
              {"i64": kv.max_len}, *([{"f32": asm.cfg.eps}] if norm else [])])
    name = asm.kernel(f"{program}.rope_attention", {"params": iface, "impl": {"steps": [step]}},
                      f"own `{symbol}`: the layer's q{'/k norm, ' if norm else ' and k '}rope, "
                      f"K/V cache writes and decode attention in one launch "
                      f"(kern_gen/llama/fuse_rope_attention.py)")
    return {"label": op.label, "kernel": name,
            "args": [asm.arg(a["qkv"]), *((asm.arg(a["q_w"]), asm.arg(a["k_w"])) if norm else ()),
                     asm.arg(a["angles"]), asm.arg(a["slots"]), asm.arg(a["kc"]),
                     asm.arg(a["vc"]), asm.arg(KV_LENS), asm.arg(BLOCK_TABLE),
                     asm.arg(a["out"])]}
