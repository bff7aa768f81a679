"""The own norm launches in the machine code (CPU, needs nvcc): ``kern_rmsnorm_first_bf16`` and
``kern_rmsnorm_add_bf16`` read nothing before their grid-dependency wait (so kern-gen may give
them ``pdl`` without the weights-first allowance) and let their dependents launch before it
(since session 27; right after it before): the reason they exist (ABI.md 4g; the captured
norms trigger after their last store).  A norm that triggers before its wait cannot precede a
step that reads state early: kern_gen.llama.pdl_order refuses that order from these facts."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402

@pytest.mark.parametrize("symbol", ["kern_rmsnorm_first_bf16", "kern_rmsnorm_add_bf16"])
def test_the_norms_trigger_before_their_wait_and_read_nothing_before_it(symbol):
    f = sass.pdl_facts(_own_kernels_gpu.cubin_bytes("rmsnorm.cu"), symbol)
    assert f.waits_first and f.trigger_at is not None and f.trigger_at < f.wait, f
    assert not f.triggers_after_wait, f
