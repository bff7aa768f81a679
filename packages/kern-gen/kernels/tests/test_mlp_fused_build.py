"""The fused-MLP lever's build (CPU, needs nvcc; levers/mlp_fused.cu, probe_mlp_fused.py): it
compiles with build.py's flags outside build.py's glob, and its first SiLU weight batch (two
16-row tiles x lo/hi rows x 4 steps) is requested before its grid-dependency wait, as
kern_gemv_silu_bf16's is."""
from __future__ import annotations

import sys
from pathlib import Path

from kern_gen.llama import sass

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
import _own_kernels_gpu  # noqa: E402


def test_the_fused_mlp_requests_its_first_weight_batch_before_the_wait():
    cubin = _own_kernels_gpu.cubin_bytes("levers/mlp_fused.cu")
    assert sass.accesses_before_wait(cubin, "kern_mlp_fused_bf16") == 16


def test_build_globs_no_lever():
    b = _own_kernels_gpu._build_module()
    assert all(p.parent == HERE for p in b.sources())
