"""The GEMV's first W batch and the grid-dependency wait in the machine code (CPU, needs nvcc):
the whole first batch (kUnroll = 4 steps x 2 W rows a tile, 16-byte loads) is requested
before the wait (SASS ACQBULK) and nothing else is, in every GEMV variant.  Until session 24
the batch was a ``.nc`` load, which ptxas scheduled after the wait: no W byte was requested
while the previous kernel ran (docs/plan-issue-16.md, session 23).  This pins the fix
(gemv_core.cuh ``ld_w_first``) against a compiler or source change that undoes it."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402
SYMBOLS = {"gemv.cu": {"kern_gemv_bf16": 1, "kern_gemv_silu_bf16": 2, "kern_gemv_acc_bf16": 1,
                       "kern_gemv_split3_bf16": 1, "kern_gemv_et_bf16": 1,
                       "kern_gemv_silu_et_bf16": 2},
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
