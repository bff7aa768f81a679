"""GPU tests of ``kern_gemv_silu_et_bf16`` (gemv.cu: kern_gemv_silu_bf16 letting its dependents
launch right after its wait; kern-gen's choice for decode's small SiLU GEMVs, pdl_order
``small_early_triggers``): kern_gemv_silu_bf16's bits, and the MLP chain gate_up + SiLU -> h
-> down launched with PDL 20 times over NaN-poisoned h and output (down starts while gate_up
still streams and must wait for h), on the Qwen3-4B and SmolLM2 shapes.

Marked ``gpu``; skips without torch, cupy, a GPU or nvcc / $KERN_KERNELS_CUBINS.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gemv_gpu import GUARD, _inputs, env  # noqa: E402,F401

SYMBOL = "kern_gemv_silu_et_bf16"


@pytest.fixture(scope="module")
def early(env):
    torch, ok, kern = env
    return kern.fn("gemv.cubin", SYMBOL)


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
@pytest.mark.parametrize("hidden,inter", [(2560, 9728), (576, 1536)])
@pytest.mark.parametrize("m", [1, 8])
def test_early_silu_then_down_under_pdl(env, early, m, hidden, inter):
    """An MLP (Qwen3-4B's, SmolLM2's): x -> gate_up + SiLU (the early twin) -> h -> down
    (kern_gemv_bf16) -> z, both with PDL: z has the bits of plain launches."""
    import _own_kernels_gpu as okg
    torch, ok, kern = env
    launch = okg.pdl_launcher()
    if launch is None:
        pytest.skip("no cuLaunchKernelEx")
    g = torch.Generator(device="cuda").manual_seed(m)
    x = torch.randn((m, hidden), generator=g, device="cuda").to(torch.bfloat16)
    w1 = (torch.randn((2 * inter, hidden), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    w2 = (torch.randn((hidden, inter), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    h = torch.empty((m, inter), dtype=torch.bfloat16, device="cuda")
    z = torch.empty((m, hidden), dtype=torch.bfloat16, device="cuda")
    w_up = ok.gemv_warps(2 * inter, hidden)
    kern.gemv_silu(x, w1, h, w_up)
    kern.gemv(h, w2, z)
    torch.cuda.synchronize()
    want = z.clone()
    assert not torch.isnan(want).any()
    down = kern.fn("gemv.cubin", "kern_gemv_bf16")
    w_down = ok.gemv_warps(hidden, inter)
    stream = torch.cuda.Stream()
    for _ in range(20):
        with torch.cuda.stream(stream):
            h.fill_(float("nan"))
            z.fill_(float("nan"))
            launch(early, (-(-inter // 16), -(-m // 8), 1), (32 * w_up, 1, 1), 0,
                   stream.cuda_stream, _args(x, w1, h, inter))
            launch(down, (-(-hidden // 16), -(-m // 8), 1), (32 * w_down, 1, 1), 0,
                   stream.cuda_stream, _args(h, w2, z, hidden))
        stream.synchronize()
        assert torch.equal(z, want)
