"""The own kernels' GPU tests: the ``env`` fixture (torch, the harness module, the loaded
kernels), skipping cleanly without torch, cupy, a GPU or nvcc."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="module")
def env():
    torch = pytest.importorskip("torch")
    pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU / driver")
    import _own_kernels_gpu
    if not os.environ.get("KERN_KERNELS_CUBINS"):
        build = _own_kernels_gpu._build_module()
        if build.find_nvcc() is None:
            pytest.skip("nvcc not found and $KERN_KERNELS_CUBINS not set")
    torch.cuda.init()
    return torch, _own_kernels_gpu, _own_kernels_gpu.Kernels(_own_kernels_gpu.cubin_dir())
