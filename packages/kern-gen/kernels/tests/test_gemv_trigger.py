"""Where the GEMVs let their dependents launch (CPU, needs nvcc): ``kern_gemv_et_bf16``
within a few instructions of its wait (SASS PREEXIT after ACQBULK), every other gemv.cu
kernel after its main loop; both after the wait, the fact kern_gen.llama.pdl_order needs
from the predecessor of a step that reads before its own wait.  The early kernel's code is
kern_gemv_bf16's but for the trigger's place (same instructions, same count)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402

LATE = ("kern_gemv_bf16", "kern_gemv_silu_bf16", "kern_gemv_acc_bf16", "kern_gemv_split3_bf16")
EARLY = "kern_gemv_et_bf16"
NEAR = 16
"""most instructions between the wait and an early trigger (the build's: 8)"""


@pytest.fixture(scope="module")
def cubin():
    return _own_kernels_gpu.cubin_bytes("gemv.cu")


def test_trigger_positions(cubin):
    for sym in (*LATE, EARLY):
        f = sass.pdl_facts(cubin, sym)
        assert f.triggers_after_wait and f.trigger_at is not None, sym
        assert (f.trigger_at - f.wait <= NEAR) == (sym == EARLY), (sym, f)

