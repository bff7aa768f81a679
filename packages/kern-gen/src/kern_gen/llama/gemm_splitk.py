"""``--gemm splitk``: the own GEMV with k split over a thread-block cluster where a shape
leaves SMs idle (kernels/gemv_splitk.cu, ABI.md 4f); gemv.cu's kernels everywhere else.

A gemv.cu block owns 16 output columns times the whole of k, so a weight with few columns
and a long k is few, large blocks: Qwen3-4B's o_proj (2560 x 4096) and down_proj
(2560 x 9728) are 160 blocks on the 132 SMs, and 28 SMs stream a second block while the
others idle.  :func:`splits` cuts k in S parts for such shapes (160 S blocks of 1/S the bytes);
the S blocks of a column tile form one cluster and its rank 0 adds their partial sums in rank
order (deterministic; the same dot products as gemv.cu up to the order of the k sums).

The same rule holds in every few-row program (it depends on the weight's shape only), so
decode and verify compute the same bits for a row, as with gemv.cu.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .ir import TOK

if TYPE_CHECKING:
    from .assemble import Assembler

SPLITK_CUBIN = "gemv_splitk.cubin"
SPLITS = (2, 4, 8)
"""The cluster sizes gemv_splitk.cu is built for (``kern_gemv[_silu]_sk{S}_bf16``)."""
SMS = 132
"""SMs of the target GPU (H100 SXM and H200 alike)."""
MAX_BLOCKS = 2 * SMS
"""Split only a GEMV of fewer 16-column blocks than this: with more, every SM already holds
two or more blocks and the last, partial round of blocks is a small share."""
TARGET_BLOCKS = 4 * SMS
"""The smallest S of :data:`SPLITS` that reaches this many blocks (else the largest)."""
MIN_STEPS = 16
"""k steps of 32 elements each split keeps at least (fewer: the cluster merge outweighs the
shorter stream)."""
MIN_BYTES = 16 << 20
"""Split only a weight of at least this many bytes (W's rows of the GEMV: 2 n k).  Below it the
GEMV is latency-bound (16 MiB stream in ~3.5 µs at 4.8 TB/s, about two launch ramps), so an
SM's extra block costs little and the cluster barrier would cost more: SmolLM2-135M's GEMVs
(1-3.5 MB, measured launch-bound, docs/measurements.md issue 16) keep gemv.cu."""


def splits(cols: int, k: int, tiles: int = 1) -> int:
    """Cluster size S for a GEMV of ``cols`` output columns (the gate columns of the SiLU
    variant, whose blocks read ``tiles`` = 2 W rows a column) and ``k``: 1 (gemv.cu) or one of
    :data:`SPLITS`.  A provisional rule (session 23: written without a GPU;
    kernels/bench_gemv_splitk.py measures every S per shape)."""
    blocks = -(-cols // 16)
    if blocks >= MAX_BLOCKS or 2 * tiles * cols * k < MIN_BYTES:
        return 1
    steps = -(-k // 32)
    best = 1
    for s in SPLITS:
        if steps < s * MIN_STEPS:
            break
        best = s
        if blocks * s >= TARGET_BLOCKS:
            break
    return best


def symbol(s: int, silu: bool) -> str:
    return f"kern_gemv_{'silu_' if silu else ''}sk{s}_bf16"


def splitk_step(asm: Assembler, s: int, silu: bool, params: list[str], cols: int, nw: int,
                rows: Any) -> dict[str, Any]:
    """A step of a gemv_splitk.cu kernel: grid ``[ceil(cols / 16), ceil(rows / 8), s]``,
    ``nw`` warps (gemv.cu's for the shape: the same blocks' work split in k), the
    interface's arguments forwarded; weights only before the grid-dependency wait."""
    gy = -(-rows // 8) if isinstance(rows, int) else {"ceil_div": [TOK, 8]}
    return asm.own_step(SPLITK_CUBIN, symbol(s, silu), weights_first=True, params=params,
                        block=[32 * nw, 1, 1], grid=[-(-cols // 16), gy, s],
                        args=[{"arg": i} for i in range(len(params))])
