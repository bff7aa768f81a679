"""The GEMV timeline probe's build (CPU, needs nvcc): ``-D KERN_GEMV_TIMELINE=1`` (gemv_core.cuh, kern_timeline.cuh)
adds the record buffer probe_gemv_timeline.py sets and keeps the first W batch before the
wait (the timeline of another code would measure nothing); the build without it has none of
it (the examples' cubins are the build's: their regeneration tests pin those bytes)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402

GLOBALS = (b"kern_tl", b"kern_tl_n", b"kern_tl_cap")


@pytest.mark.parametrize("timeline", [0, 1])
def test_only_the_timeline_build_records_and_its_first_batch_stays_before_the_wait(timeline):
    cubin = _own_kernels_gpu.cubin_bytes("gemv.cu", (f"KERN_GEMV_TIMELINE={timeline}",))
    assert all((g in cubin) == bool(timeline) for g in GLOBALS)
    for sym, tiles in {"kern_gemv_bf16": 1, "kern_gemv_et_bf16": 1,
                       "kern_gemv_silu_bf16": 2}.items():
        assert sass.accesses_before_wait(cubin, sym) == 8 * tiles, sym
