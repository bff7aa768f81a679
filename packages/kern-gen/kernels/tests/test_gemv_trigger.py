"""Where the GEMVs let their dependents launch (CPU, needs nvcc): the built code triggers
(SASS PREEXIT) after its main loop, and the lever ``KERN_GEMV_EARLY_TRIGGER=1`` (gemv_core.cuh,
off in the build; session 25) within a few instructions of the wait (SASS ACQBULK).  Both keep
the trigger after the wait, the fact kern_gen.llama.pdl_order needs from an attention's
predecessor."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402

SYMBOLS = ("kern_gemv_bf16", "kern_gemv_silu_bf16", "kern_gemv_acc_bf16",
           "kern_gemv_split3_bf16")
NEAR = 16
"""instructions between the wait and an early trigger (the variant's are 8 and 4)"""


@pytest.fixture(scope="module")
def builds():
    return {early: _own_kernels_gpu.cubin_bytes(
        "gemv.cu", ("KERN_GEMV_EARLY_TRIGGER=1",) if early else ()) for early in (False, True)}


@pytest.mark.parametrize("early", [False, True])
def test_trigger_position(builds, early):
    for sym in SYMBOLS:
        f = sass.pdl_facts(builds[early], sym)
        assert f.triggers_after_wait and f.trigger_at is not None, sym
        assert (f.trigger_at - f.wait <= NEAR) == early, (sym, f)
