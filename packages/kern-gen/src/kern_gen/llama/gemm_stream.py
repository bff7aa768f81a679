"""``--gemm stream``: the own GEMV with each GEMM's work split evenly over a persistent grid of
thread-block clusters (kernels/gemv_stream.cu, ABI.md 4h) where that layout holds the shape;
gemv.cu's kernels everywhere else.

gemv.cu gives a block one 16-column tile, so its grid is balanced only where the tile count
is a multiple of the SMs' block slots; on the Qwen3-4B shape o and down (160 tiles on 132
SMs), gate_up (608 tiles, 2.3 waves) and qkv (384 tiles) are not, and the SMs that run more
tiles end 1.5-4 µs after the others (H100, probe_gemv_timeline.py, session 28).  The stream
GEMV gives each of :data:`CLUSTERS` clusters of :data:`CLUSTER` blocks an equal share of the
tiles and each block an equal share of its cluster's (tile, k step) units; a tile split
between two blocks of a cluster is summed through distributed shared memory.

The rule depends on the weight's shape only, so every few-row program computes the same bits
for a row (the kernel's k partition depends on n, k and the grid, not on m).  The fused q/k/v
GEMV of verify (``gemm_split``) keeps gemv.cu: under this lever decode's merged qkv and
verify's split one differ in their last bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import WiringError
from .ir import TOK

if TYPE_CHECKING:
    from .assemble import Assembler

STREAM_CUBIN = "gemv_stream.cubin"
SYMBOLS = {"gemm": "kern_gemv_stream_bf16", "silu": "kern_gemv_stream_silu_bf16"}
ET_SYMBOL = "kern_gemv_stream_et_bf16"
"""The plain kernel's twin whose dependents launch right after its wait (gemm.EARLY_TWINS)."""
CLUSTER = 2
"""Blocks of a cluster (compiled in: gemv_stream.cu ``KERN_STREAM_CLUSTER``)."""
CLUSTERS = 66
"""Clusters a grid: one a TPC of the H100 SXM's and H200's 132 SMs, all resident at once.
(32 clusters of 4 would split o / down ideally, but session 29's first run of that layout on
an H100 was 60 % slower, as if some clusters waited for a second wave: a GPC's SM count need
not be a multiple of 4.)"""
MAX_TILES = 1 << 20
"""Use the stream GEMV only for shapes of at most this many 16-column tiles (a lever's knob,
``variant_lever.py --set gemm_stream.MAX_TILES=…``)."""
WARPS = 16
SLOTS = 2
"""Tiles a warp's contiguous units may touch (gemv_stream.cu kSlots)."""


def fits(cols: int, k: int) -> bool:
    """Does the stream layout hold a GEMV of ``cols`` output columns (the gate columns of
    the SiLU variant) and ``k``: at least one tile a block, and no warp's units over more than
    :data:`SLOTS` tiles (a warp's ceil(units / WARPS) units touch at most two tiles when they
    are at most one tile's steps + 1).  Qwen3-4B: qkv, o, gate_up, down yes, lm_head no (74
    tiles a block); SmolLM2-135M: none (36-192 tiles)."""
    tiles, steps = -(-cols // 16), -(-k // 32)
    if tiles < CLUSTER * CLUSTERS or tiles > MAX_TILES:
        return False
    per_block = -(-(-(-tiles // CLUSTERS)) * steps // CLUSTER)
    return -(-per_block // WARPS) <= steps + 1


def used(asm: Assembler, cols: int, k: int) -> bool:
    return asm.gemm_impl == "stream" and fits(cols, k)


def stream_step(asm: Assembler, kind: str, params: list[str], rows: Any) -> dict[str, Any]:
    """A step of a gemv_stream.cu kernel: grid ``[CLUSTER·CLUSTERS, ceil(rows / 8), 1]``,
    :data:`WARPS` warps, the interface's arguments forwarded; weights only before its wait."""
    gy = -(-rows // 8) if isinstance(rows, int) else {"ceil_div": [TOK, 8]}
    return asm.own_step(STREAM_CUBIN, SYMBOLS[kind], weights_first=True, params=params,
                        block=[32 * WARPS, 1, 1], grid=[CLUSTER * CLUSTERS, gy, 1],
                        args=[{"arg": i} for i in range(len(params))])


def stream_impl(asm: Assembler, rows: Any, n: int, k: int) -> tuple[dict[str, Any], str]:
    """The stream GEMV where :func:`fits`, else gemv.cu's (:func:`.gemm.gemv_impl`)."""
    from .gemm import PARAMS, gemv_impl   # gemm imports this module
    if not fits(n, k):
        return gemv_impl(asm, rows, n, k)
    if k % 8:
        raise WiringError(f"GEMM n {n} k {k}: the own GEMV needs k % 8 == 0")
    st = stream_step(asm, "gemm", PARAMS, rows)
    return {"steps": [st]}, (f"own `{SYMBOLS['gemm']}` ({CLUSTERS} clusters of {CLUSTER} "
                             f"blocks x {WARPS} warps, work split evenly)")
