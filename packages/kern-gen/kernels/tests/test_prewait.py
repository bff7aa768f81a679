"""The GEMV's first W batch and the grid-dependency wait in the machine code (CPU, needs nvcc):
in the default build ptxas places the wait (ACQBULK) before every load, so no W byte is
requested while the previous kernel runs; with ``KERN_GEMV_PREWAIT=1`` (gemv_core.cuh) the
whole first batch (kUnroll = 4 steps x 2 W rows a tile, 16-byte loads) comes before it and
nothing else does.  Pins the fact docs/plan-issue-16.md (session 23) builds the lever on;
when the lever becomes the default, this test changes with it."""
from __future__ import annotations

import sys
import tempfile
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
    b = _own_kernels_gpu._build_module()
    nvcc = b.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, defines in (("default", ()), ("prewait", ("KERN_GEMV_PREWAIT=1",))):
            d = Path(tmp) / label
            out[label] = {src: b.build_one(nvcc, HERE / src, d, defines=defines).read_bytes()
                          for src in SYMBOLS}
    return out


@pytest.mark.parametrize("src", list(SYMBOLS))
def test_default_build_loads_nothing_before_the_wait(builds, src):
    for sym in SYMBOLS[src]:
        assert sass.pdl_facts(builds["default"][src], sym).wait is not None, sym
        assert sass.accesses_before_wait(builds["default"][src], sym) == 0, sym


@pytest.mark.parametrize("src", list(SYMBOLS))
def test_prewait_build_requests_the_first_batch_before_the_wait(builds, src):
    for sym, tiles in SYMBOLS[src].items():
        assert sass.pdl_facts(builds["prewait"][src], sym).wait is not None, sym
        assert sass.accesses_before_wait(builds["prewait"][src], sym) == 8 * tiles, sym
