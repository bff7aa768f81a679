"""The own rope kernels' dispatches (``packages/kern-gen/kernels/``, ABI in ``kernels/ABI.md``
3c-3e′): the rotary angles and a layer's q/k rope with its K/V cache writes (:mod:`.fuse_rope`).
Each declares its manifest kernel once per distinct body and returns the dispatch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .arch import INV_FREQ
from .ir import POSITIONS, TOK, Op, Ref

if TYPE_CHECKING:
    from .assemble import Assembler


def rope_angles(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    p = ["in buffer<i64>", "in buffer<f32>", "out buffer<f32>", "i32"]
    step = asm.own_step("rope_angles.cubin", "kern_rope_angles_f32",
                        params=[*p, "i32"], block=[128, 1, 1], grid=[rows, 1, 1],
                        args=[{"arg": 0}, {"arg": 1}, {"arg": 2}, {"arg": 3},
                              {"i32": asm.cfg.head_dim // 2}])
    name = asm.kernel("rope_angles", {"params": p, "impl": {"steps": [step]}},
                      "own `kern_rope_angles_f32` (replaces the captured cutlass sgemm "
                      "`inv_freq x positions`, which takes a by-value struct)")
    t = {"sym": "tokens"} if rows == TOK else {"i32": rows}
    return {"label": op.label, "kernel": name,
            "args": [asm.arg(POSITIONS), asm.arg(Ref(buf=INV_FREQ)), asm.arg(op.args["out"]),
                     t]}


ROPE_KV = {   # variant -> (cubin, symbol, bf16 inputs, the captured kernels it replaces)
    "qkv": ("rope_kv.cubin", "kern_rope_kv_bf16", ("qkv",),
            "k rope + K write, V write and q rope (three kernels)"),
    "split": ("rope_kv.cubin", "kern_rope_kv3_bf16", ("q", "k", "v"),
              "k rope + K/V writes and q rope (two kernels)"),
    "norm": ("rope_kv_norm.cubin", "kern_rope_kv_norm_bf16", ("qkv", "q_w", "k_w"),
             "q norm + rope, k norm + rope + K write and V write (three kernels)"),
    "norm_split": ("rope_kv_norm.cubin", "kern_rope_kv3_norm_bf16",
                   ("q", "k", "v", "q_w", "k_w"),
                   "q/k variance, sin and cos halves and K/V writes (six kernels)"),
}
"""The rope + K/V kernels of :mod:`.fuse_rope` (ABI.md 3d, 3d′, 3e, 3e′), by the op's
arguments."""


def rope_kv(asm: Assembler, program: str, op: Op, rows: Any) -> dict[str, Any]:
    """One layer's q/k rope and K/V cache writes (:mod:`.fuse_rope`): from the merged qkv rows,
    from q, k, v in three buffers, or (Qwen3) with the per-head q/k RMSNorm first."""
    cfg, a = asm.cfg, op.args
    variant = ("norm" if "qkv" in a else "norm_split") if "q_w" in a else (
        "qkv" if "qkv" in a else "split")
    cubin, symbol, ins, replaced = ROPE_KV[variant]
    p = [*(["in buffer<bf16>"] * len(ins)), "in buffer<f32>", "in buffer<i64>",
         "out buffer<bf16>", "inout ptr", "inout ptr", "i32"]
    lits = [{"i32": cfg.heads}, {"i32": cfg.kv_heads}, {"i32": cfg.head_dim},
            {"i64": asm.kv.max_len}]
    grid: list[Any] = [rows, 1, 1]
    norm = variant.startswith("norm")
    if norm:                    # one warp per head, 8 a block
        lits.append({"f32": cfg.eps})
        grid[1] = -(-(cfg.heads + 2 * cfg.kv_heads) // 8)
    step = asm.own_step(cubin, symbol, params=[*p, "i32", "i32", "i32", "i64",
                                               *(["f32"] if norm else [])],
                        block=[256, 1, 1], grid=grid,
                        args=[*({"arg": i} for i in range(len(p))), *lits])
    name = asm.kernel(f"{program}.rope_kv", {"params": p, "impl": {"steps": [step]}},
                      f"own `{symbol}` (replaces the captured {replaced} of a layer by "
                      f"one launch, kern_gen/llama/fuse_rope.py)")
    t = {"sym": "tokens"} if rows == TOK else {"i32": rows}
    return {"label": op.label, "kernel": name,
            "args": [*(asm.arg(a[x]) for x in ins), asm.arg(a["angles"]),
                     asm.arg(a["slots"]), asm.arg(a["out"]), asm.arg(a["kc"]),
                     asm.arg(a["vc"]), t]}
