"""GPU tests of the split-K GEMV (``kern_gemv[_silu]_sk{S}_bf16``, ABI.md 4f): the example
shapes it is generated for and odd ones (k not a multiple of S steps, ranks with no k at
all, n not a multiple of 16, a second y block) against a float64 reference within the plain
GEMV's bound and no worse than cuBLAS (test_gemv_gpu's check), SiLU·mul against the
composition of the plain split-K halves, bit reproducibility, and a PDL chain over
NaN-poisoned intermediates.

Marked ``gpu``; skips without torch, cupy, a GPU or nvcc (test_gemv_gpu's fixture).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _own_kernels_gpu import report as _report  # noqa: E402
import test_gemv_gpu as _plain  # noqa: E402
from test_gemv_gpu import GUARD, _check, _inputs, _pdl_launcher  # noqa: E402

env = _plain.env       # the plain GEMV tests' fixture: (torch, helpers, Kernels)

SPLITS = [2, 4, 8]
# (n, k): Qwen3-4B o / down / qkv, SmolLM2 o / down
SHAPES = [(2560, 4096), (2560, 9728), (6144, 2560), (576, 576), (576, 1536)]
ODD = [  # (n, k, m): k not a multiple of S * 32, k < S * 32 (empty ranks), n % 16 != 0, m 9
    (1000, 584, 3), (17, 8, 9), (2567, 9736, 5), (100, 4096, 11), (33, 40, 16)]


def _run(torch, kern, a, w, splits, warps=None, silu=False):
    m, n = a.shape[0], w.shape[0] // (2 if silu else 1)
    buf = torch.full((m * n + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")
    kern.gemv_splitk(a, w, buf, splits, warps=warps, silu=silu)
    torch.cuda.synchronize()
    assert torch.isnan(buf[m * n:]).all(), "wrote past C[m, n]"
    return buf[:m * n].view(m, n)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 9])
@pytest.mark.parametrize("splits", SPLITS)
@pytest.mark.parametrize("n,k", SHAPES)
def test_splitk_example_shapes(env, n, k, splits, m):
    torch, ok, kern = env
    a, w = _inputs(torch, n, k, m, seed=n + k + m + splits)
    got = _run(torch, kern, a, w, splits)
    _check(torch, f"splitk S{splits} n{n} k{k} m{m}", a, w, got)


@pytest.mark.gpu
@pytest.mark.parametrize("splits", SPLITS)
@pytest.mark.parametrize("n,k,m", ODD)
def test_splitk_odd_shapes(env, n, k, m, splits):
    torch, ok, kern = env
    a, w = _inputs(torch, n, k, m, seed=3 * n + k + m + splits)
    _check(torch, f"splitk odd S{splits} n{n} k{k} m{m}", a, w,
           _run(torch, kern, a, w, splits))


@pytest.mark.gpu
@pytest.mark.parametrize("warps", [1, 4, 16])
def test_splitk_block_sizes(env, warps):
    torch, ok, kern = env
    a, w = _inputs(torch, 2560, 9728, 8, seed=warps)
    _check(torch, f"splitk S4 down m8 NW={warps}", a, w, _run(torch, kern, a, w, 4, warps))


@pytest.mark.gpu
@pytest.mark.parametrize("splits", SPLITS)
def test_splitk_bit_reproducible(env, splits):
    torch, ok, kern = env
    a, w = _inputs(torch, 2560, 9728, 8, seed=11)
    first = _run(torch, kern, a, w, splits)
    for _ in range(3):
        assert torch.equal(_run(torch, kern, a, w, splits), first)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 9])
@pytest.mark.parametrize("splits", SPLITS)
@pytest.mark.parametrize("n,k", [(9728, 2560), (1536, 576), (1000, 584)])
def test_splitk_silu(env, n, k, splits, m):
    """g and u have the bits of the plain split-K kernel on each half (the same k ranges and
    warps), silu(g) * u is f32 math rounded once: within one bf16 step of that composition,
    and against float64 within the plain GEMV's bound on g and u."""
    torch, ok, kern = env
    a, w = _inputs(torch, 2 * n, k, m, seed=7 * n + k + m + splits)
    warps = ok.gemv_warps(2 * n, k)
    got = _run(torch, kern, a, w, splits, warps=warps, silu=True)
    assert not torch.isnan(got).any()
    g = _run(torch, kern, a, w[:n].contiguous(), splits, warps=warps).float()
    u = _run(torch, kern, a, w[n:].contiguous(), splits, warps=warps).float()
    want = (g * torch.sigmoid(g) * u).to(torch.bfloat16)
    diff = (got.float() - want.float()).abs()
    ulp = want.float().abs().clamp_min(2.0 ** -126) * 2.0 ** -7
    assert (diff <= ulp).all(), f"max diff {diff.max().item()} beyond one bf16 step"
    flips = int((diff > 0).sum())
    _report(f"gemv_silu_sk{splits} n{n} k{k} m{m}: {flips} of {m * n} one bf16 step off")
    assert flips <= max(2, m * n // 500), f"{flips} elements differ from the composition"
    _check(torch, f"splitk S{splits} gate n{n} k{k} m{m}", a, w[:n].contiguous(),
           g.to(torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [4, 8])
def test_splitk_chain_under_pdl(env, splits):
    """plain GEMV (PDL) -> y -> split-K GEMV (PDL) -> z, over NaN-poisoned y and z: the
    split-K kernel must wait for y before it reads it; z as from ordinary launches."""
    torch, ok, kern = env
    launch = _pdl_launcher(torch, kern)
    if launch is None:
        pytest.skip("no cuLaunchKernelEx / cupy function handle")
    pdl = ok.pdl_launcher()
    g = torch.Generator(device="cuda").manual_seed(splits)
    x = torch.randn((1, 2560), generator=g, device="cuda").to(torch.bfloat16)
    w1 = (torch.randn((9728, 2560), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    w2 = (torch.randn((2560, 9728), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    y = torch.empty((1, 9728), dtype=torch.bfloat16, device="cuda")
    z = torch.empty((1, 2560), dtype=torch.bfloat16, device="cuda")
    kern.gemv(x, w1, y)
    kern.gemv_splitk(y, w2, z, splits)
    torch.cuda.synchronize()
    want = z.clone()
    assert not torch.isnan(want).any()
    fn = kern.fn("gemv_splitk.cubin", f"kern_gemv_sk{splits}_bf16")
    stream = torch.cuda.Stream()
    for _ in range(20):
        with torch.cuda.stream(stream):
            y.fill_(float("nan"))
            z.fill_(float("nan"))
            launch(x, w1, y)
            pdl(fn, (160, 1, splits), (32 * ok.gemv_warps(2560, 9728), 1, 1), 0,
                stream.cuda_stream, [ok.ptr(y), ok.ptr(w2), ok.ptr(z), np.int32(1),
                                     np.int32(2560), np.int32(9728)])
        stream.synchronize()
        assert torch.equal(z, want)

