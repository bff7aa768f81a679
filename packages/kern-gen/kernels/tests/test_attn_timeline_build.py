"""The decode attention timeline probe's build (CPU, needs nvcc): ``-D KERN_ATTN_TIMELINE=1``
(attn_decode_cluster.cu, kern_timeline.cuh) adds the record buffer probe_attn_timeline.py sets and keeps the rope
variants' early reads (kv_lens and the first key batch) before the wait and the trigger
right after it, so that the probe times the build's launch order; the build without it has
none of it (the examples' cubins are the build's: their regeneration tests pin those
bytes)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402
from test_attn_prewait import EARLY, ROPE  # noqa: E402

GLOBALS = (b"kern_tl", b"kern_tl_n", b"kern_tl_cap")


@pytest.mark.parametrize("timeline", [0, 1])
def test_only_the_timeline_build_records_and_its_early_reads_stay(timeline):
    cubin = _own_kernels_gpu.cubin_bytes("attn_decode_cluster.cu",
                                         (f"KERN_ATTN_TIMELINE={timeline}",))
    assert all((g in cubin) == bool(timeline) for g in GLOBALS)
    for sym in ROPE:
        f = sass.pdl_facts(cubin, sym)
        assert f.wait is not None and f.triggers_after_wait, sym
        assert sass.accesses_before_wait(cubin, sym) == EARLY, sym
