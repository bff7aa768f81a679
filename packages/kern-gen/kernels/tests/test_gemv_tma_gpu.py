"""GPU tests of the bulk-copy GEMV (kernels/gemv_tma.cu, ABI.md 4d): every example shape and odd
ones (n not a multiple of 16, k not of the 1024-element chunk, k below it, m past one y block)
at the generator's persistent grid and at small grids (the tile stride), against the float64
reference within test_gemv_gpu's bound and no worse than cuBLAS; bit-identical for every grid;
the fused entry points against the plain one; the shared-memory sizes the generator pins; and
a PDL chain (the producer lets the next GEMV launch before this one has stored its output).

Marked ``gpu``; skips without torch, cupy, a GPU or nvcc.
"""
from __future__ import annotations

import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gemv_gpu import GUARD, ODD, SHAPES, _check, _inputs, env  # noqa: E402,F401

# the generator's constants (kern_gen.llama.gemm; the package need not be importable here)
SMEM = {1: 67616, 2: 135200}
GRID_CAP = {1: 396, 2: 132}   # 3 blocks a SM x 132 SMs unfused, 1 fused
BLOCK = 160
ODD_TMA = [*ODD, (48, 1024, 1), (40, 1032, 2), (16, 3080, 8), (160, 2048 + 512, 1)]


def _fn(kern, symbol, tiles):
    f = kern.fn("gemv_tma.cubin", symbol)
    f.max_dynamic_shared_size_bytes = SMEM[tiles]
    return f


def _grid(cols, m, tiles, g=None):
    t = -(-cols // 16)
    return (min(t, GRID_CAP[tiles]) if g is None else g, -(-m // 8), 1)


def tma(torch, kern, a, w, out, g=None):
    import numpy as np
    m, (n, k) = a.shape[0], w.shape
    f = _fn(kern, "kern_gemv_tma_bf16", 1)
    f(_grid(n, m, 1, g), (BLOCK, 1, 1), (np.uint64(a.data_ptr()), np.uint64(w.data_ptr()),
      np.uint64(out.data_ptr()), np.int32(m), np.int32(n), np.int32(k)), shared_mem=SMEM[1])


def _run(torch, kern, a, w, g=None):
    m, n = a.shape[0], w.shape[0]
    buf = torch.full((m * n + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")
    tma(torch, kern, a, w, buf, g)
    torch.cuda.synchronize()
    assert torch.isnan(buf[m * n:]).all(), "wrote past C[m, n]"
    return buf[:m * n].view(m, n)


@pytest.mark.gpu
def test_smem_sizes_are_the_generators(env):
    torch, ok, kern = env
    import cupy
    out = cupy.zeros(2, dtype=cupy.int32)
    kern.fn("gemv_tma.cubin", "kern_gemv_tma_smem")((1,), (32,), (out,))
    assert [int(x) for x in out.get()] == [SMEM[1], SMEM[2]]


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_tma_example_shapes(env, shape, m):
    torch, ok, kern = env
    n, k = SHAPES[shape]
    a, w = _inputs(torch, n, k, m, seed=zlib.crc32(shape.encode()) % 1000 + m)
    _check(torch, f"tma {shape} m={m}", a, w, _run(torch, kern, a, w))


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,m", ODD_TMA)
def test_tma_odd_shapes_and_grids(env, n, k, m):
    """Odd shapes at the generator's grid and at grids of 1 and 7 blocks: the same bits."""
    torch, ok, kern = env
    a, w = _inputs(torch, n, k, m, seed=n + k + m)
    got = _run(torch, kern, a, w)
    _check(torch, f"tma odd {n}x{k} m={m}", a, w, got)
    for g in (1, 7):
        assert torch.equal(_run(torch, kern, a, w, g), got), f"grid {g}"


@pytest.mark.gpu
def test_tma_stage_reuse_many_launches(env):
    """The Qwen3 lm_head at m = 8 on the generator's grid: ~24 tiles, 72 chunks a block, so
    each stage is refilled ~35 times a launch while the consumers read it.  3000 launches,
    the same bits.  Before the consumers' fence.proxy.async ahead of their `empty` arrive,
    9 of 40000 (H100) and 174 of 40000 (H200) such launches had whole W rows of one tile
    wrong (all 8 outputs of a column); m = 1 never showed it."""
    torch, ok, kern = env
    a, w = _inputs(torch, 151936, 2560, 8, seed=8)
    first = _run(torch, kern, a, w)
    _check(torch, "tma lm_head m=8 repeat", a, w, first)
    differ = sum(not torch.equal(_run(torch, kern, a, w), first) for _ in range(3000))
    assert differ == 0, f"{differ} of 3000 launches gave other bits"


@pytest.mark.gpu
def test_tma_bit_reproducible(env):
    torch, ok, kern = env
    a, w = _inputs(torch, 151936, 2560, 1, seed=3)
    first = _run(torch, kern, a, w)
    for _ in range(3):
        assert torch.equal(_run(torch, kern, a, w), first)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 9])
@pytest.mark.parametrize("n,k", [(1536, 576), (9728, 2560), (1000, 584)])
def test_tma_silu(env, n, k, m):
    """silu(g) * u: g and u are the plain entry point's bits on the two halves (rounded to
    bf16), SiLU·mul in f32 rounded once (torch's exp against __expf: within one bf16 step)."""
    import numpy as np
    torch, ok, kern = env
    a, w = _inputs(torch, 2 * n, k, m, seed=n + m)
    g, u = _run(torch, kern, a, w[:n].contiguous()), _run(torch, kern, a, w[n:].contiguous())
    want = (torch.nn.functional.silu(g.float()) * u.float())
    out = torch.full((m * n + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")
    f = _fn(kern, "kern_gemv_tma_silu_bf16", 2)
    f(_grid(n, m, 2), (BLOCK, 1, 1), (np.uint64(a.data_ptr()), np.uint64(w.data_ptr()),
      np.uint64(out.data_ptr()), np.int32(m), np.int32(n), np.int32(k)), shared_mem=SMEM[2])
    torch.cuda.synchronize()
    assert torch.isnan(out[m * n:]).all()
    got = out[:m * n].view(m, n).float()
    step = want.abs() * 2.0 ** -7 + 1e-6
    assert ((got - want).abs() <= step).all(), float((got - want).abs().max())


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 9])
@pytest.mark.parametrize("widths,k", [((4096, 1024, 1024), 2560), ((576, 192, 192), 576),
                                      ((32, 16, 8), 40)])
def test_tma_split3(env, widths, k, m):
    """Each part: the plain entry point's bits on the merged weight's columns."""
    import numpy as np
    torch, ok, kern = env
    n = sum(widths)
    a, w = _inputs(torch, n, k, m, seed=n + m)
    whole = _run(torch, kern, a, w)
    outs = [torch.full((m, x), float("nan"), dtype=torch.bfloat16, device="cuda")
            for x in widths]
    f = _fn(kern, "kern_gemv_tma_split3_bf16", 1)
    f(_grid(n, m, 1), (BLOCK, 1, 1), (np.uint64(a.data_ptr()), np.uint64(w.data_ptr()),
      *(np.uint64(o.data_ptr()) for o in outs), np.int32(m), *(np.int32(x) for x in widths),
      np.int32(k)), shared_mem=SMEM[1])
    torch.cuda.synchronize()
    start = 0
    for o, x in zip(outs, widths):
        assert torch.equal(o, whole[:, start:start + x])
        start += x


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8])
def test_tma_chain_under_pdl(env, m):
    """x -> up (9728 x 2560) -> y -> down (2560 x 9728) -> z with PDL: the second GEMV is let
    launch once the first has issued its last W copy and streams its weights early; it must
    wait for y.  z has the bits of plain launches, over NaN-poisoned y, 20 times."""
    torch, ok, kern = env
    pdl = ok.pdl_launcher()
    if pdl is None:
        pytest.skip("no cuLaunchKernelEx")
    f = _fn(kern, "kern_gemv_tma_bf16", 1)

    def launch(a, w, c):
        mm, (n, k) = a.shape[0], w.shape
        pdl(f, _grid(n, mm, 1), (BLOCK, 1, 1), SMEM[1], torch.cuda.current_stream().cuda_stream,
            [ok.ptr(a), ok.ptr(w), ok.ptr(c), np.int32(mm), np.int32(n), np.int32(k)])

    g = torch.Generator(device="cuda").manual_seed(m)
    x = torch.randn((m, 2560), generator=g, device="cuda").to(torch.bfloat16)
    w1 = (torch.randn((9728, 2560), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    w2 = (torch.randn((2560, 9728), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    y = torch.empty((m, 9728), dtype=torch.bfloat16, device="cuda")
    z = torch.empty((m, 2560), dtype=torch.bfloat16, device="cuda")
    tma(torch, kern, x, w1, y)
    tma(torch, kern, y, w2, z)
    torch.cuda.synchronize()
    want = z.clone()
    assert not torch.isnan(want).any()
    stream = torch.cuda.Stream()
    for _ in range(20):
        with torch.cuda.stream(stream):
            y.fill_(float("nan"))
            z.fill_(float("nan"))
            launch(x, w1, y)
            launch(y, w2, z)
        stream.synchronize()
        assert torch.equal(z, want)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [2, 7, 8])
def test_tma_many_launches_bit_identical(env, m):
    """300 launches each of the three entry points at verify / draft row counts, outputs
    NaN-poisoned in between: the same bits every time.  (Session 15 saw identical DSpark runs
    with the bulk-copy GEMV in verify and draft give different tokens, PDL on and off; this
    asks whether the kernel alone is the cause.)"""
    import numpy as np
    torch, ok, kern = env
    a, w = _inputs(torch, 6144, 2560, m, seed=m)
    _, wg = _inputs(torch, 19456, 2560, m, seed=m + 1)
    widths = (4096, 1024, 1024)
    outs = [torch.empty((m, x), dtype=torch.bfloat16, device="cuda") for x in widths]
    h = torch.empty((m, 9728), dtype=torch.bfloat16, device="cuda")
    f3, fs = _fn(kern, "kern_gemv_tma_split3_bf16", 1), _fn(kern, "kern_gemv_tma_silu_bf16", 2)
    P = np.uint64

    def launch():
        f3(_grid(6144, m, 1), (BLOCK, 1, 1), (P(a.data_ptr()), P(w.data_ptr()),
           *(P(o.data_ptr()) for o in outs), np.int32(m), *(np.int32(x) for x in widths),
           np.int32(2560)), shared_mem=SMEM[1])
        fs(_grid(9728, m, 2), (BLOCK, 1, 1), (P(a.data_ptr()), P(wg.data_ptr()),
           P(h.data_ptr()), np.int32(m), np.int32(9728), np.int32(2560)), shared_mem=SMEM[2])

    launch()
    torch.cuda.synchronize()
    want = [o.clone() for o in (*outs, h)]
    plain = _run(torch, kern, a, w)
    assert torch.equal(torch.cat(want[:3], dim=1), plain)
    differ = 0
    for _ in range(300):
        for o in (*outs, h):
            o.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        differ += any(not torch.equal(o, x) for o, x in zip((*outs, h), want))
    assert differ == 0, f"{differ} of 300 launches gave other bits"
