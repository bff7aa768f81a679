"""The GEMV's first W batch and the grid-dependency wait in the machine code (CPU, needs nvcc):
the whole first batch (kUnroll = 4 steps x 2 W rows a tile, 16-byte loads) is requested
before the wait (SASS ACQBULK) and nothing else is, in every GEMV variant.  Until session 24
the batch was a ``.nc`` load, which ptxas scheduled after the wait: no W byte was requested
while the previous kernel ran (docs/plan-issue-16.md, session 23).  This pins the fix
(gemv_core.cuh ``ld_w_first``) against a compiler or source change that undoes it."""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402
SYMBOLS = {"gemv.cu": {"kern_gemv_bf16": 1, "kern_gemv_silu_bf16": 2, "kern_gemv_acc_bf16": 1,
                       "kern_gemv_split3_bf16": 1},
           "gemv_splitk.cu": {"kern_gemv_sk4_bf16": 1, "kern_gemv_silu_sk4_bf16": 2}}
"""source -> {symbol: W tiles a block}: the first batch is 4 steps x 2 rows x tiles loads."""


@pytest.fixture(scope="module")
def builds():
    return {src: _own_kernels_gpu.cubin_bytes(src) for src in SYMBOLS}


@pytest.mark.parametrize("src", list(SYMBOLS))
def test_the_first_batch_and_nothing_else_is_requested_before_the_wait(builds, src):
    for sym, tiles in SYMBOLS[src].items():
        assert sass.pdl_facts(builds[src], sym).wait is not None, sym
        assert sass.accesses_before_wait(builds[src], sym) == 8 * tiles, sym


CCTL = 0x98F
"""SASS CCTL: ``prefetch.global.L2`` compiles to ``CCTL.E.PF2`` (a cache hint, not a data
access, so :func:`sass.accesses_before_wait` does not count it)."""


def _before_wait(cubin: bytes, symbol: str, opcode: int) -> int:
    code = sass.function_code(cubin, symbol)
    n = 0
    for i in range(len(code) // 16):
        lo = struct.unpack_from("<Q", code, 16 * i)[0]
        if lo & 0xFFF == sass.ACQBULK and (lo >> 12) & 0xF == 0x7:
            return n
        n += lo & 0xFFF == opcode
    raise AssertionError(f"{symbol}: no unconditional wait")


@pytest.mark.parametrize("batches", [0, 1])
def test_the_prefetch_lever_asks_its_batches_into_l2_before_the_wait(batches):
    """``-D KERN_GEMV_PREFETCH=N`` (session 26's lever, 0 in the build): N more W batches
    asked into L2 before the wait, one prefetch per 16-byte load they stand for, and the
    first batch still the only loads there.  A prefetch that ptxas sank below the wait would
    measure nothing (the first batch's history, above)."""
    cubin = _own_kernels_gpu.cubin_bytes("gemv.cu", (f"KERN_GEMV_PREFETCH={batches}",))
    for sym, tiles in SYMBOLS["gemv.cu"].items():
        assert _before_wait(cubin, sym, CCTL) == 8 * tiles * batches, sym
        assert sass.accesses_before_wait(cubin, sym) == 8 * tiles, sym
