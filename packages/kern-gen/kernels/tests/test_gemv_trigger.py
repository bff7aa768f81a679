"""Where the GEMVs let their dependents launch (CPU, needs nvcc): ``kern_gemv_et_bf16``,
``kern_gemv_silu_et_bf16`` and ``kern_gemv_rnorm_et_bf16`` within a few instructions of their
wait (SASS PREEXIT after ACQBULK), every other gemv.cu and gemv_norm.cu kernel after its main loop; all after the
wait, the fact kern_gen.llama.pdl_order needs from the predecessor of a step that reads
before its own wait.  (That the twins compute kern_gemv_bf16's and kern_gemv_rnorm_bf16's
bits are GPU tests: test_gemv_gpu.py, test_gemv_norm_gpu.py.)"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402

LATE = {"gemv.cu": ("kern_gemv_bf16", "kern_gemv_silu_bf16", "kern_gemv_acc_bf16",
                    "kern_gemv_split3_bf16"),
        "gemv_norm.cu": ("kern_gemv_norm_bf16", "kern_gemv_rnorm_bf16",
                         "kern_gemv_rnorm_silu_bf16", "kern_gemv_res_bf16")}
EARLY = {"gemv.cu": ("kern_gemv_et_bf16", "kern_gemv_silu_et_bf16"),
         "gemv_norm.cu": ("kern_gemv_rnorm_et_bf16",)}
NEAR = 16
"""most instructions between the wait and an early trigger (the build's: 8)"""


@pytest.mark.parametrize("src", list(EARLY))
def test_trigger_positions(src):
    cubin = _own_kernels_gpu.cubin_bytes(src)
    for sym in (*LATE[src], *EARLY[src]):
        f = sass.pdl_facts(cubin, sym)
        assert f.triggers_after_wait and f.trigger_at is not None, sym
        assert (f.trigger_at - f.wait <= NEAR) == (sym in EARLY[src]), (sym, f)
