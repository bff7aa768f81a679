"""GPU tests of the 8-column-tile GEMV (gemv_h2.cu, ABI.md 4h): ``kern_gemv_h2_bf16`` on the
examples' one-row shapes and odd ones against a float64 reference next to cuBLAS (the bound
and the "no worse than cuBLAS" checks of test_gemv_gpu.py), outputs poisoned with NaN and
a NaN guard after them; every block size; bit reproducibility; NaN rows of W and A past n
and m never read; the SiLU kernel against the composition of two plain h2 GEMVs; the
early-trigger twins' bits; and a decode MLP (gate_up + SiLU -> h -> down on h2) under PDL
over NaN-poisoned h, bit for bit against plain launches.

Marked ``gpu``; skips without torch, cupy, a GPU or nvcc / $KERN_KERNELS_CUBINS.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gemv_gpu import GUARD, _check, _inputs, env  # noqa: E402,F401

CUBIN = "gemv_h2.cubin"
PLAIN, SILU = "kern_gemv_h2_bf16", "kern_gemv_silu_h2_bf16"
COLS, ROWS = 8, 4

# name -> (n, k): the shapes kern-gen's rule may give it (one-row, k % 16 == 0)
SHAPES = {"qwen3 o": (2560, 4096), "qwen3 down": (2560, 9728), "qwen3 qkv": (6144, 2560),
          "smollm2 qkv": (960, 576), "smollm2 o": (576, 576), "smollm2 down": (576, 1536)}
ODD = [  # n not a multiple of 8, k / 2 not a multiple of 32, m = 5 (a second y block)
    (1001, 592, 1), (13, 16, 3), (2567, 9744, 5), (100, 4096, 2), (7, 48, 1)]


def _warps(rows_w: int, k: int) -> int:
    from kern_gen.llama.gemv_h2 import h2_warps
    return h2_warps(rows_w, k)


def _launch(kern, symbol, a, w, c, n, warps):
    import _own_kernels_gpu as okg
    m, k = a.shape
    kern.fn(CUBIN, symbol)((-(-n // COLS), -(-m // ROWS), 1), (32 * warps, 1, 1),
                           (okg.ptr(a), okg.ptr(w), okg.ptr(c), np.int32(m), np.int32(n),
                            np.int32(k)))


def _run(torch, kern, a, w, warps=None, symbol=PLAIN, silu=False):
    """Our C[m, n] (n = w's rows, half of them for ``silu``) from a NaN buffer with a NaN
    guard after it, checked."""
    m, (rows_w, k) = a.shape[0], w.shape
    n = rows_w // 2 if silu else rows_w
    warps = _warps(rows_w, k) if warps is None else warps
    buf = torch.full((m * n + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")
    _launch(kern, symbol, a, w, buf, n, warps)
    torch.cuda.synchronize()
    assert torch.isnan(buf[m * n:]).all(), "wrote past C[m, n]"
    return buf[:m * n].view(m, n)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 4, 5])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_h2_example_shapes(env, shape, m):
    torch, ok, kern = env
    n, k = SHAPES[shape]
    a, w = _inputs(torch, n, k, m, seed=n + k + m)
    _check(torch, f"h2 {shape} n{n} k{k} m{m} NW={_warps(n, k)}", a, w, _run(torch, kern, a, w))


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,m", ODD)
def test_h2_odd_shapes(env, n, k, m):
    torch, ok, kern = env
    a, w = _inputs(torch, n, k, m, seed=3 * n + k + m)
    _check(torch, f"h2 odd n{n} k{k} m{m}", a, w, _run(torch, kern, a, w))


@pytest.mark.gpu
@pytest.mark.parametrize("warps", [1, 2, 3, 4, 8, 16])
def test_h2_every_block_size(env, warps):
    torch, ok, kern = env
    a, w = _inputs(torch, 2560, 9728, 1, seed=warps)
    _check(torch, f"h2 qwen3 down m1 NW={warps}", a, w, _run(torch, kern, a, w, warps=warps))


@pytest.mark.gpu
def test_h2_bit_reproducible_and_twin_bits(env):
    torch, ok, kern = env
    a, w = _inputs(torch, 2560, 4096, 1, seed=11)
    first = _run(torch, kern, a, w)
    for _ in range(2):
        assert torch.equal(_run(torch, kern, a, w), first)
    assert torch.equal(_run(torch, kern, a, w, symbol="kern_gemv_h2_et_bf16"), first)


@pytest.mark.gpu
def test_h2_reads_only_its_rows(env):
    """NaN rows of W after n and of A after m (same allocations) do not reach C."""
    torch, ok, kern = env
    n, k, m = 1001, 592, 3
    a, w = _inputs(torch, n, k, m, seed=2)
    wp = torch.full((n + 16, k), float("nan"), dtype=torch.bfloat16, device="cuda")
    ap = torch.full((m + 8, k), float("nan"), dtype=torch.bfloat16, device="cuda")
    wp[:n], ap[:m] = w, a
    got = _run(torch, kern, ap[:m], wp[:n])
    assert torch.equal(got, _run(torch, kern, a, w))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 5])
@pytest.mark.parametrize("n,k", [(9728, 2560), (1536, 576), (1001, 592)])
def test_h2_silu(env, n, k, m):
    """silu(g) * u: g and u have the bits of the plain h2 GEMV with the same block size
    (rounded to bf16 first), SiLU·mul in f32 rounded once (within one bf16 step of torch's
    composition: __expf against exp); the twin has the same bits."""
    torch, ok, kern = env
    a, w = _inputs(torch, 2 * n, k, m, seed=7 * n + k + m)
    warps = _warps(2 * n, k)
    got = _run(torch, kern, a, w, warps=warps, symbol=SILU, silu=True)
    assert not torch.isnan(got).any()
    assert torch.equal(_run(torch, kern, a, w, warps=warps, symbol="kern_gemv_silu_h2_et_bf16",
                            silu=True), got)
    g = _run(torch, kern, a, w[:n].contiguous(), warps=warps).float()
    u = _run(torch, kern, a, w[n:].contiguous(), warps=warps).float()
    want = (torch.nn.functional.silu(g) * u).to(torch.bfloat16).float()
    step = want.abs() * 2.0 ** -7 + 1e-6
    assert ((got.float() - want).abs() <= step).all()


@pytest.mark.gpu
@pytest.mark.parametrize("first", [SILU, "kern_gemv_silu_h2_et_bf16"])
@pytest.mark.parametrize("hidden,inter", [(2560, 9728), (576, 1536)])
def test_h2_mlp_under_pdl(env, first, hidden, inter):
    """x -> gate_up + SiLU (h2) -> h -> down (h2) -> z, both with PDL, 20 times over
    NaN-poisoned h and z: down starts while gate_up still runs and must wait for h."""
    import _own_kernels_gpu as okg
    torch, ok, kern = env
    launch = okg.pdl_launcher()
    if launch is None:
        pytest.skip("no cuLaunchKernelEx")
    g = torch.Generator(device="cuda").manual_seed(hidden)
    x = torch.randn((1, hidden), generator=g, device="cuda").to(torch.bfloat16)
    w1 = (torch.randn((2 * inter, hidden), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    w2 = (torch.randn((hidden, inter), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    h = torch.empty((1, inter), dtype=torch.bfloat16, device="cuda")
    z = torch.empty((1, hidden), dtype=torch.bfloat16, device="cuda")
    w_up, w_down = _warps(2 * inter, hidden), _warps(hidden, inter)
    _launch(kern, SILU, x, w1, h, inter, w_up)
    _launch(kern, PLAIN, h, w2, z, hidden, w_down)
    torch.cuda.synchronize()
    want = z.clone()
    assert not torch.isnan(want).any()

    def pdl(symbol, a, w, c, n, warps):
        launch(kern.fn(CUBIN, symbol), (-(-n // COLS), 1, 1), (32 * warps, 1, 1), 0,
               torch.cuda.current_stream().cuda_stream,
               [okg.ptr(a), okg.ptr(w), okg.ptr(c), np.int32(1), np.int32(n),
                np.int32(a.shape[1])])

    stream = torch.cuda.Stream()
    for _ in range(20):
        with torch.cuda.stream(stream):
            h.fill_(float("nan"))
            z.fill_(float("nan"))
            pdl(first, x, w1, h, inter, w_up)
            pdl(PLAIN, h, w2, z, hidden, w_down)
        stream.synchronize()
        assert torch.equal(z, want)
