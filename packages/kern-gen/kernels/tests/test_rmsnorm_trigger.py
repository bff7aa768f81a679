"""The own norm launches in the machine code (CPU, needs nvcc): ``kern_rmsnorm_first_bf16`` and
``kern_rmsnorm_add_bf16`` read nothing before their grid-dependency wait (so kern-gen may give
them ``pdl`` without the weights-first allowance) and let their dependents launch within a
few instructions after it, before any load: the reason they exist (ABI.md 4g; the captured
norms trigger after their last store)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402

NEAR = 8
"""most instructions between the wait and the trigger (the build's: 4)"""


@pytest.mark.parametrize("symbol", ["kern_rmsnorm_first_bf16", "kern_rmsnorm_add_bf16"])
def test_the_norms_trigger_right_after_their_wait(symbol):
    f = sass.pdl_facts(_own_kernels_gpu.cubin_bytes("rmsnorm.cu"), symbol)
    assert f.waits_first and f.triggers_after_wait, f
    assert f.trigger_at - f.wait <= NEAR, f
    assert f.first_access is not None and f.first_access[0] > f.trigger_at, f
