"""GPU tests of the GEMV main loop with a shared-memory stage (gemv_stage.cuh, a lever build:
gemv.cu with ``-D KERN_GEMV_STAGE=1``): for every stage size the launch's dynamic shared
memory gives (0 to 4 steps a warp), the plain, early-trigger and SiLU entry points compute
the build's bits (same mma order), at the example shapes, odd ones (n not a multiple of 16, k
not of 32, a second y block) and several block sizes, with a NaN guard after C; and a PDL
chain of two staged GEMVs over NaN-poisoned inputs (the race check: the stage is filled
after the wait).

Marked ``gpu``; skips without torch, cupy, a GPU or nvcc (the staged cubin is built here).
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gemv_gpu import GUARD, SHAPES, _inputs, env  # noqa: E402,F401

STAGES = [0, 1, 2, 3, 4]
CASES = [  # (n, k, m, warps)
    *[(*SHAPES[s], m, None) for s in ("qwen3 qkv", "qwen3 o", "qwen3 down", "smollm2 o",
                                      "smollm2 down") for m in (1, 8)],
    (1000, 576, 3, None), (17, 8, 9, 1), (2567, 9736, 5, 16), (100, 4096, 11, 3),
    (6152, 2568, 9, 8),
]


@pytest.fixture(scope="module")
def staged(env):
    """The staged build's gemv.cubin, loaded."""
    torch, ok, kern = env
    b = ok._build_module()
    nvcc = b.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (the staged build is made here)")
    import cupy
    tmp = Path(tempfile.mkdtemp(prefix="kern-stage-"))
    return cupy.RawModule(path=str(b.build_one(nvcc, b.HERE / "gemv.cu", tmp,
                                               defines=("KERN_GEMV_STAGE=1",))))


def _smem(warps, stage, tiles):
    return warps * stage * (2 * tiles + 1) * 512


def _launch(fn, a, w, c, n, warps, smem):
    import _own_kernels_gpu as okg
    m, k = a.shape[0], a.shape[1]
    fn.max_dynamic_shared_size_bytes = max(smem, 0)
    fn((-(-n // 16), -(-m // 8), 1), (32 * warps, 1, 1),
       (okg.ptr(a), okg.ptr(w), okg.ptr(c), np.int32(m), np.int32(n), np.int32(k)),
       shared_mem=smem)


def _out(torch, m, n):
    return torch.full((m * n + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")


def _done(torch, buf, m, n):
    torch.cuda.synchronize()
    assert torch.isnan(buf[m * n:]).all(), "wrote past C[m, n]"
    return buf[:m * n].view(m, n)


@pytest.mark.gpu
@pytest.mark.parametrize("symbol", ["kern_gemv_bf16", "kern_gemv_et_bf16"])
@pytest.mark.parametrize("n,k,m,warps", CASES)
def test_staged_gemv_has_the_build_bits(env, staged, n, k, m, warps, symbol):
    torch, ok, kern = env
    warps = ok.gemv_warps(n, k) if warps is None else warps
    a, w = _inputs(torch, n, k, m, seed=n + 3 * k + m)
    ref = _out(torch, m, n)
    kern.gemv(a, w, ref, warps=warps)
    want = _done(torch, ref, m, n)
    assert not torch.isnan(want).any()
    fn = staged.get_function(symbol)
    for stage in STAGES:
        buf = _out(torch, m, n)
        _launch(fn, a, w, buf, n, warps, _smem(warps, stage, 1))
        got = _done(torch, buf, m, n)
        assert torch.equal(got, want), f"stage {stage}: {int((got != want).sum())} differ"


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,m,warps", [(9728, 2560, 1, 8), (9728, 2560, 8, 8),
                                         (1536, 576, 9, 16), (1000, 584, 3, 4)])
def test_staged_silu_has_the_build_bits(env, staged, n, k, m, warps):
    torch, ok, kern = env
    a, w = _inputs(torch, 2 * n, k, m, seed=5 * n + k + m)
    ref = _out(torch, m, n)
    kern.gemv_silu(a, w, ref, warps)
    want = _done(torch, ref, m, n)
    assert not torch.isnan(want).any()
    fn = staged.get_function("kern_gemv_silu_bf16")
    for stage in STAGES:
        buf = _out(torch, m, n)
        _launch(fn, a, w, buf, n, warps, _smem(warps, stage, 2))
        got = _done(torch, buf, m, n)
        assert torch.equal(got, want), f"stage {stage}: {int((got != want).sum())} differ"


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8])
def test_staged_chain_under_pdl(env, staged, m):
    """x -> up (n 9728, k 2560) -> y -> down (n 2560, k 9728) -> z, both staged (3 steps a
    warp) and launched with PDL, 20 times over NaN-poisoned y and z: z has the build's bits."""
    import _own_kernels_gpu as okg
    torch, ok, kern = env
    launch = okg.pdl_launcher()
    if launch is None:
        pytest.skip("no cuLaunchKernelEx")
    g = torch.Generator(device="cuda").manual_seed(m)
    x = torch.randn((m, 2560), generator=g, device="cuda").to(torch.bfloat16)
    w1 = (torch.randn((9728, 2560), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    w2 = (torch.randn((2560, 9728), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    y = torch.empty((m, 9728), dtype=torch.bfloat16, device="cuda")
    z = torch.empty((m, 2560), dtype=torch.bfloat16, device="cuda")
    kern.gemv(x, w1, y)
    kern.gemv(y, w2, z)
    torch.cuda.synchronize()
    want = z.clone()
    fns = [staged.get_function(s) for s in ("kern_gemv_et_bf16", "kern_gemv_bf16")]
    stream = torch.cuda.Stream()
    for _ in range(20):
        with torch.cuda.stream(stream):
            y.fill_(float("nan"))
            z.fill_(float("nan"))
            for fn, (a, w, c) in zip(fns, ((x, w1, y), (y, w2, z))):
                n, k = w.shape
                nw = okg.gemv_warps(n, k)
                smem = _smem(nw, 3, 1)
                fn.max_dynamic_shared_size_bytes = smem
                launch(fn, (-(-n // 16), -(-m // 8), 1), (32 * nw, 1, 1), smem,
                       stream.cuda_stream, [okg.ptr(a), okg.ptr(w), okg.ptr(c), np.int32(m),
                                            np.int32(n), np.int32(k)])
        stream.synchronize()
        assert torch.equal(z, want)
