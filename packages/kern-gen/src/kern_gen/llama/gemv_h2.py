"""The GEMV with 8-column tiles (kernels/gemv_h2.cu, ABI.md 4h) for one-row GEMMs whose
16-column tiles spread unevenly over the SMs.

gemv.cu's block owns 16 output columns and all of k.  Qwen3-4B's o_proj (2560 x 4096) and
down_proj (2560 x 9728) are then 160 blocks on 132 SMs: 28 SMs stream two and end 1.5 /
2.3 µs after the rest (H100, session 28's timeline probe).  gemv_h2.cu's block owns 8
columns, its mma rows holding each W row's two k halves: 320 blocks of half the work (at
most three a SM against 2.4 on average), the same bytes in flight per warp, one launch, no
merge.  The dot products are summed in another f32 order than gemv.cu's, so the bits
differ; kern-gen uses it only where :func:`use_h2` says so.

The rule is by shape and rows only: ``rows == 1`` (the one-row programs, decode), k a
multiple of 16, and ``ceil(cols / 16)`` between :data:`MIN_BLOCKS` and :data:`MAX_BLOCKS`
(plain GEMVs) or :data:`SILU` (the gate/up GEMV with SiLU·mul).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .gemm_splitk import SMS

if TYPE_CHECKING:
    from .assemble import Assembler

H2_CUBIN = "gemv_h2.cubin"
PLAIN, SILU_SYMBOL = "kern_gemv_h2_bf16", "kern_gemv_silu_h2_bf16"
EARLY_TWINS = {(H2_CUBIN, PLAIN): "kern_gemv_h2_et_bf16",
               (H2_CUBIN, SILU_SYMBOL): "kern_gemv_silu_h2_et_bf16"}
"""gemv_h2.cu's kernels and their early-trigger twins (same contract and bits)."""
WEIGHT_ROWS = {PLAIN: 1, SILU_SYMBOL: 2}
COLS, ROWS = 8, 4
"""Output columns and rows of A a block of gemv_h2.cu computes."""

MIN_BLOCKS = 1 << 30
"""A plain one-row GEMV of at least this many 16-column blocks (and at most
:data:`MAX_BLOCKS`) runs gemv_h2.cu.  Off until measured end to end (``variant_lever.py
--set gemv_h2.MIN_BLOCKS=133`` gives Qwen3-4B's o and down the 8-column tiles)."""
MAX_BLOCKS = 2 * SMS - 1
"""With more blocks every SM already holds two or more: the uneven last round is small."""
SILU = 0
"""1: the one-row gate/up GEMVs (SiLU·mul) run gemv_h2.cu's SiLU kernel too."""


def use_h2(rows: Any, cols: int, k: int, silu: bool = False) -> bool:
    """Does a GEMV of ``cols`` output columns (gate columns for ``silu``) over ``k`` run
    gemv_h2.cu?"""
    if rows != 1 or k % 16:
        return False
    if silu:
        return bool(SILU)
    return MIN_BLOCKS <= -(-cols // 16) <= MAX_BLOCKS


def h2_warps(weight_rows: int, k: int) -> int:
    """Warps a block: gemv.cu's rule (:func:`.gemm.gemv_warps`) for twice the rows, each
    summing half of k — the bytes a warp streams equal gemv.cu's for that shape."""
    from .gemm import gemv_warps
    return gemv_warps(2 * weight_rows, k // 2)


def h2_step(asm: Assembler, symbol: str, params: list[str], cols: int, k: int
            ) -> tuple[dict[str, Any], str]:
    """A one-row step of gemv_h2.cu's ``symbol`` over ``cols`` output columns (gate columns
    for the SiLU kernel) in blocks of 8, the interface's arguments forwarded (only W's first
    batch before its wait), and the report's words for it."""
    silu = symbol == SILU_SYMBOL
    nw = h2_warps(2 * cols if silu else cols, k)
    st = asm.own_step(H2_CUBIN, symbol, weights_first=True, params=params,
                      block=[32 * nw, 1, 1], grid=[-(-cols // COLS), 1, 1],
                      args=[{"arg": i} for i in range(len(params))])
    what = "gate/up GEMV + SiLU·mul, " if silu else ""
    return st, f"own `{symbol}` ({what}blocks of 8 columns x {nw} warps)"
