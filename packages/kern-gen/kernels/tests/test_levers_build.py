"""The levers' builds (CPU, needs nvcc; kernels/levers/, each with its probe_*.py): they
compile with build.py's flags outside build.py's glob, and their first weight batch is
requested before the grid-dependency wait, as the shipped GEMV's is: the fused MLP's (two
16-row tiles x lo/hi rows x 4 steps, as kern_gemv_silu_bf16) and the fused qkv + attention's
(one tile: 8, as kern_gemv_bf16, at both register budgets the probe builds)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402


def test_the_fused_mlp_requests_its_first_weight_batch_before_the_wait():
    cubin = _own_kernels_gpu.cubin_bytes("levers/mlp_fused.cu")
    assert sass.accesses_before_wait(cubin, "kern_mlp_fused_bf16") == 16


@pytest.mark.parametrize("min_blocks", [2, 3])
def test_the_fused_qkv_attention_requests_its_first_weight_batch_before_the_wait(min_blocks):
    cubin = _own_kernels_gpu.cubin_bytes("levers/qkv_attn_fused.cu",
                                         (f"KERN_FUSED_MIN_BLOCKS={min_blocks}",))
    assert sass.accesses_before_wait(cubin, "kern_qkv_attn_fused_bf16_d128") == 8


def test_build_globs_no_lever():
    b = _own_kernels_gpu._build_module()
    assert all(p.parent == HERE for p in b.sources())
