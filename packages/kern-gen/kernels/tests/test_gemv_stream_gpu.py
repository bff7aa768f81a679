"""GPU tests of the stream GEMV (gemv_stream.cu, ABI.md 4h: each GEMM's work split evenly over
a persistent grid of clusters): accuracy against float64 no worse than cuBLAS, the
early-trigger twin's and the SiLU variant's bits against the plain kernel's, rows independent
of m, the same bits on every launch (the cluster's split-tile sums), and the decode chain
gate_up + SiLU -> h -> down under PDL over NaN-poisoned h.

Marked ``gpu``; skips without torch, cupy, a GPU or nvcc / $KERN_KERNELS_CUBINS.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from kern_gen.llama import gemm_stream as GS

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gemv_gpu import GUARD, _check, _errors, _inputs, env  # noqa: E402,F401

from _own_kernels_gpu import report  # noqa: E402

CUBIN = "gemv_stream.cubin"
PLAIN, EARLY, SILU = ("kern_gemv_stream_bf16", "kern_gemv_stream_et_bf16",
                      "kern_gemv_stream_silu_bf16")
CLUSTER, CLUSTERS, WARPS = GS.CLUSTER, GS.CLUSTERS, GS.WARPS   # the generator's launch


def _args(a, w, c, n):
    import _own_kernels_gpu as okg
    m, k = a.shape
    return [okg.ptr(a), okg.ptr(w), okg.ptr(c), np.int32(m), np.int32(n), np.int32(k)]


def _geometry(m, clusters=CLUSTERS, warps=WARPS):
    return (CLUSTER * clusters, -(-m // 8), 1), (32 * warps, 1, 1)


def _run(torch, kern, symbol, a, w, n, clusters=CLUSTERS, warps=WARPS):
    """C[m, n] of ``symbol`` (a view of a NaN buffer whose guard after C is checked)."""
    m = a.shape[0]
    buf = torch.full((m * n + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")
    grid, block = _geometry(m, clusters, warps)
    kern.fn(CUBIN, symbol)(grid, block, tuple(_args(a, w, buf, n)))
    torch.cuda.synchronize()
    assert torch.isnan(buf[m * n:]).all(), "wrote past C[m, n]"
    return buf[:m * n].view(m, n)


# (n, k): Qwen3-4B's qkv, o, down (the shapes kern-gen gives it), then odd ones: n not a
# multiple of 16 (a partial last tile), k not of 32 (a partial last step)
PLAIN_SHAPES = [(6144, 2560), (2560, 4096), (2560, 9728), (2568, 4104), (2100, 584)]


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 3, 8, 9])
@pytest.mark.parametrize("n,k", PLAIN_SHAPES)
def test_stream_against_float64(env, n, k, m):
    torch, ok, kern = env
    a, w = _inputs(torch, n, k, m, seed=5 * n + k + m)
    _check(torch, f"stream n{n} k{k} m{m}", a, w, _run(torch, kern, PLAIN, a, w, n))


@pytest.mark.gpu
@pytest.mark.parametrize("clusters,warps", [(5, 16), (7, 16), (66, 8), (40, 3)])
def test_stream_other_grids(env, clusters, warps):
    """Any cluster count and block size the layout holds gives the product (its last bits
    may differ): 5 and 7 clusters leave unequal tile counts a cluster."""
    torch, ok, kern = env
    n, k = 2560, 4096
    a, w = _inputs(torch, n, k, 2, seed=clusters * 17 + warps)
    got = _run(torch, kern, PLAIN, a, w, n, clusters, warps)
    _check(torch, f"stream o C={clusters} NW={warps}", a, w, got)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("n,k", [(6144, 2560), (2560, 4096)])
def test_stream_early_twin_has_the_plain_bits(env, n, k, m):
    torch, ok, kern = env
    a, w = _inputs(torch, n, k, m, seed=n + m)
    assert torch.equal(_run(torch, kern, EARLY, a, w, n), _run(torch, kern, PLAIN, a, w, n))


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(2560, 9728), (9728 * 2, 2560)])
def test_stream_rows_are_independent(env, n, k):
    """Row i of an m = 8 launch has the bits of a one-row launch of A's row i (decode and a
    many-row program compute a row alike)."""
    torch, ok, kern = env
    a, w = _inputs(torch, n, k, 8, seed=n)
    many = _run(torch, kern, PLAIN, a, w, n)
    for i in (0, 5, 7):
        assert torch.equal(_run(torch, kern, PLAIN, a[i:i + 1].contiguous(), w, n)[0], many[i])


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 9])
@pytest.mark.parametrize("n,k", [(9728, 2560), (2120, 584)])
def test_stream_silu(env, n, k, m):
    """silu(g) * u from one launch: g and u have the plain stream kernel's bits on the gate and
    up halves (the same layout over n / 16 tiles), rounded to bf16 first, SiLU*mul in f32;
    against that composition within one bf16 step, and against float64 no worse than cuBLAS
    GEMMs + torch's SiLU*mul."""
    torch, ok, kern = env
    a, w = _inputs(torch, 2 * n, k, m, seed=7 * n + k + m)
    got = _run(torch, kern, SILU, a, w, n)
    assert not torch.isnan(got).any()
    g = _run(torch, kern, PLAIN, a, w[:n].contiguous(), n).float()
    u = _run(torch, kern, PLAIN, a, w[n:].contiguous(), n).float()
    want = (g * torch.sigmoid(g) * u).to(torch.bfloat16)
    diff = (got.float() - want.float()).abs()
    ulp = want.float().abs().clamp_min(2.0 ** -126) * 2.0 ** -7
    assert (diff <= ulp).all(), f"max diff {diff.max().item()} beyond one bf16 step"
    flips = int((diff > 0).sum())
    assert flips <= max(2, m * n // 500), f"{flips} elements differ from the composition"
    ref_g = a.double() @ w[:n].double().T
    ref_u = a.double() @ w[n:].double().T
    ref = ref_g * torch.sigmoid(ref_g) * ref_u
    cg = torch.nn.functional.linear(a, w[:n]).float()
    cu = torch.nn.functional.linear(a, w[n:]).float()
    cub = (cg * torch.sigmoid(cg) * cu).to(torch.bfloat16)
    o_max, o_mean = _errors(torch, got, ref)
    c_max, c_mean = _errors(torch, cub, ref)
    report(f"stream silu n{n} k{k} m{m} vs float64: max {o_max:.3e} mean {o_mean:.3e} | "
           f"cuBLAS + torch: max {c_max:.3e} mean {c_mean:.3e}; {flips} flips vs composition")
    slack = ref.abs().max().item() * 2.0 ** -16
    assert o_max <= 1.5 * c_max + slack and o_mean <= 1.2 * c_mean + slack


@pytest.mark.gpu
@pytest.mark.parametrize("symbol,n,k", [(PLAIN, 2560, 4096), (SILU, 9728, 2560)])
def test_stream_same_bits_every_launch(env, symbol, n, k):
    """500 launches back to back: the split tiles' cluster sums (rank r reads rank r + 1's
    partial after a cluster barrier) give the first launch's bits every time."""
    torch, ok, kern = env
    rows = 2 * n if symbol == SILU else n
    a, w = _inputs(torch, rows, k, 1, seed=zlib_seed(symbol))
    first = _run(torch, kern, symbol, a, w, n).clone()
    grid, block = _geometry(1)
    outs = torch.full((500, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    f = kern.fn(CUBIN, symbol)
    for i in range(500):
        f(grid, block, tuple(_args(a, w, outs[i], n)))
    torch.cuda.synchronize()
    bad = int((outs != first).any(dim=1).sum())
    assert bad == 0, f"{bad} of 500 launches differ from the first"


def zlib_seed(text: str) -> int:
    import zlib
    return zlib.crc32(text.encode())


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8])
def test_stream_chain_under_pdl(env, m):
    """x -> gate_up + SiLU -> h -> down -> z, both stream kernels launched with PDL (down starts
    while gate_up streams and must wait for h), 20 times over NaN-poisoned h and z: z has the
    bits of the plain launches."""
    torch, ok, kern = env
    import _own_kernels_gpu as okg
    launch = okg.pdl_launcher()
    if launch is None:
        pytest.skip("no cuLaunchKernelEx / cupy function handle")
    g = torch.Generator(device="cuda").manual_seed(m)
    x = torch.randn((m, 2560), generator=g, device="cuda").to(torch.bfloat16)
    w1 = (torch.randn((2 * 9728, 2560), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    w2 = (torch.randn((2560, 9728), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    h = torch.empty((m, 9728), dtype=torch.bfloat16, device="cuda")
    z = torch.empty((m, 2560), dtype=torch.bfloat16, device="cuda")
    grid, block = _geometry(m)
    up, down = kern.fn(CUBIN, SILU), kern.fn(CUBIN, PLAIN)
    up(grid, block, tuple(_args(x, w1, h, 9728)))
    down(grid, block, tuple(_args(h, w2, z, 2560)))
    torch.cuda.synchronize()
    want = z.clone()
    assert not torch.isnan(want).any()
    stream = torch.cuda.Stream()
    for _ in range(20):
        with torch.cuda.stream(stream):
            h.fill_(float("nan"))
            z.fill_(float("nan"))
            s = stream.cuda_stream
            launch(up, grid, block, 0, s, _args(x, w1, h, 9728))
            launch(down, grid, block, 0, s, _args(h, w2, z, 2560))
        stream.synchronize()
        assert torch.equal(z, want)
