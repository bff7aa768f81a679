"""The staged GEMV's lever build (CPU, needs nvcc): ``-D KERN_GEMV_STAGE=1`` (gemv.cu,
gemv_stage.cuh) makes the plain, early-trigger and SiLU entry points request a register batch
of 3 steps before the wait (nothing else) and fill the shared-memory stage by cp.async (SASS
LDGSTS) after it; ``KERN_GEMV_STAGE=0`` is the build's gemv.cubin byte for byte (the examples'
cubins are the build's: their regeneration tests pin those bytes)."""
from __future__ import annotations

import sys
from pathlib import Path

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402

LDGSTS = next(op for op, name in sass.GLOBAL_MEMORY.items() if name == "LDGSTS")
ENTRIES = {"kern_gemv_bf16": 1, "kern_gemv_et_bf16": 1, "kern_gemv_silu_bf16": 2}


def test_the_stage_build_waits_after_its_register_batch_and_copies_after():
    cubin = _own_kernels_gpu.cubin_bytes("gemv.cu", ("KERN_GEMV_STAGE=1",))
    for sym, tiles in ENTRIES.items():
        assert sass.accesses_before_wait(cubin, sym) == 6 * tiles, sym
        copies = sum(op == LDGSTS for _, op, _ in sass._ops(cubin, sym))
        assert copies >= 2 * (2 * tiles + 1), (sym, copies)   # the stage, after the wait


def test_stage_off_is_the_build():
    assert (_own_kernels_gpu.cubin_bytes("gemv.cu", ("KERN_GEMV_STAGE=0",))
            == _own_kernels_gpu.cubin_bytes("gemv.cu"))
