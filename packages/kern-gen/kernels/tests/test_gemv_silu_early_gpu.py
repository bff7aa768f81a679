"""GPU tests of the SiLU GEMV's early-trigger lever build (gemv.cu with ``-D
KERN_GEMV_SILU_EARLY=1``: kern_gemv_silu_bf16 lets its dependents launch right after its
wait): the build's bits, and the decode chain gate_up + SiLU -> h -> down launched with PDL
20 times over NaN-poisoned h and output (down starts while gate_up still streams and must
wait for h).

Marked ``gpu``; skips without torch, cupy, a GPU or nvcc (the variant is built here).
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gemv_gpu import GUARD, _inputs, env  # noqa: E402,F401

SYMBOL = "kern_gemv_silu_bf16"


@pytest.fixture(scope="module")
def early(env):
    """kern_gemv_silu_bf16 of the lever build."""
    torch, ok, kern = env
    b = ok._build_module()
    nvcc = b.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (the variant is built here)")
    import cupy
    tmp = Path(tempfile.mkdtemp(prefix="kern-silu-early-"))
    cubin = b.build_one(nvcc, b.HERE / "gemv.cu", tmp, defines=("KERN_GEMV_SILU_EARLY=1",))
    return cupy.RawModule(path=str(cubin)).get_function(SYMBOL)


def _args(a, w, c, n):
    import _own_kernels_gpu as okg
    m, k = a.shape
    return [okg.ptr(a), okg.ptr(w), okg.ptr(c), np.int32(m), np.int32(n), np.int32(k)]


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,m", [(9728, 2560, 1), (9728, 2560, 8), (1536, 576, 9),
                                   (1000, 584, 3)])
def test_early_silu_has_the_build_bits(env, early, n, k, m):
    torch, ok, kern = env
    a, w = _inputs(torch, 2 * n, k, m, seed=3 * n + k + m)
    warps = ok.gemv_warps(2 * n, k)
    want = torch.full((m * n + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")
    kern.gemv_silu(a, w, want, warps)
    got = torch.full_like(want, float("nan"))
    early((-(-n // 16), -(-m // 8), 1), (32 * warps, 1, 1), tuple(_args(a, w, got, n)))
    torch.cuda.synchronize()
    assert torch.isnan(got[m * n:]).all(), "wrote past C[m, n]"
    assert not torch.isnan(want[:m * n]).any()
    assert torch.equal(got[:m * n], want[:m * n])


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8])
def test_early_silu_then_down_under_pdl(env, early, m):
    """Qwen3-4B's MLP: x -> gate_up + SiLU (the lever, n 9728, k 2560) -> h -> down (the
    build's kern_gemv_bf16, n 2560, k 9728) -> z, both with PDL: z has the bits of plain
    launches."""
    import _own_kernels_gpu as okg
    torch, ok, kern = env
    launch = okg.pdl_launcher()
    if launch is None:
        pytest.skip("no cuLaunchKernelEx")
    g = torch.Generator(device="cuda").manual_seed(m)
    x = torch.randn((m, 2560), generator=g, device="cuda").to(torch.bfloat16)
    w1 = (torch.randn((2 * 9728, 2560), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    w2 = (torch.randn((2560, 9728), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    h = torch.empty((m, 9728), dtype=torch.bfloat16, device="cuda")
    z = torch.empty((m, 2560), dtype=torch.bfloat16, device="cuda")
    w_up = ok.gemv_warps(2 * 9728, 2560)
    kern.gemv_silu(x, w1, h, w_up)
    kern.gemv(h, w2, z)
    torch.cuda.synchronize()
    want = z.clone()
    assert not torch.isnan(want).any()
    down = kern.fn("gemv.cubin", "kern_gemv_bf16")
    w_down = ok.gemv_warps(2560, 9728)
    stream = torch.cuda.Stream()
    for _ in range(20):
        with torch.cuda.stream(stream):
            h.fill_(float("nan"))
            z.fill_(float("nan"))
            launch(early, (9728 // 16, -(-m // 8), 1), (32 * w_up, 1, 1), 0,
                   stream.cuda_stream, _args(x, w1, h, 9728))
            launch(down, (2560 // 16, -(-m // 8), 1), (32 * w_down, 1, 1), 0,
                   stream.cuda_stream, _args(h, w2, z, 2560))
        stream.synchronize()
        assert torch.equal(z, want)
