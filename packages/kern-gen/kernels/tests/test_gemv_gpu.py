"""GPU tests of the own GEMV (``kern_gemv_bf16`` and its early-trigger twin, ABI.md 4):
every decode / verify GEMM shape of the two examples at m = 1, 2, 4, 8 and odd shapes, against a float64 reference on the same
bf16 values (outputs poisoned with NaN, with a NaN guard after them that must survive), its
error next to cuBLAS's (torch bf16 ``linear``, f32 compute as the runtime's cuBLASLt extern)
on the same reference, bit reproducibility, every block size, row independence.

Marked ``gpu``; skips without torch, cupy, a GPU or nvcc.  Errors are appended to
``$KERN_KERNELS_REPORT`` when set (device_check.sh shows them).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _own_kernels_gpu import report as _report  # noqa: E402

GUARD = 64           # NaN elements after the output that must stay NaN


@pytest.fixture(scope="module")
def env():
    torch = pytest.importorskip("torch")
    pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU / driver")
    import _own_kernels_gpu as ok
    if not os.environ.get("KERN_KERNELS_CUBINS") and ok._build_module().find_nvcc() is None:
        pytest.skip("nvcc not found and $KERN_KERNELS_CUBINS not set")
    torch.cuda.init()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    return torch, ok, ok.Kernels(ok.cubin_dir())


# name -> (n, k): the examples' decode GEMMs (merged qkv / gate_up) and verify's unmerged ones
SHAPES = {
    "qwen3 qkv": (6144, 2560), "qwen3 o": (2560, 4096), "qwen3 gate_up": (19456, 2560),
    "qwen3 down": (2560, 9728), "qwen3 lm_head": (151936, 2560), "qwen3 q": (4096, 2560),
    "qwen3 k/v": (1024, 2560), "qwen3 gate/up": (9728, 2560),
    "smollm2 qkv": (960, 576), "smollm2 o": (576, 576), "smollm2 gate_up": (3072, 576),
    "smollm2 down": (576, 1536), "smollm2 lm_head": (49152, 576), "smollm2 k/v": (192, 576),
    "smollm2 gate/up": (1536, 576),
}
ODD = [  # (n, k, m): n not a multiple of 16, k not of 32, m = 3, m = 9 (a second y block)
    (1000, 576, 3), (17, 8, 9), (6152, 2568, 9), (33, 40, 16), (5, 24, 1), (2567, 9736, 5),
    (100, 4096, 11),
]


def _inputs(torch, n, k, m, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((m, k), generator=g, device="cuda").to(torch.bfloat16)
    w = (torch.randn((n, k), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    return a, w


def _run(torch, kern, a, w, warps=None, symbol="kern_gemv_bf16"):
    """Our C[m, n] (a view of a NaN buffer with a NaN guard after it, checked)."""
    m, n = a.shape[0], w.shape[0]
    buf = torch.full((m * n + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")
    kern.gemv(a, w, buf, warps=warps, symbol=symbol)
    torch.cuda.synchronize()
    assert torch.isnan(buf[m * n:]).all(), "wrote past C[m, n]"
    return buf[:m * n].view(m, n)


def _errors(torch, got, ref):
    err = (got.double() - ref).abs()
    return err.max().item(), err.mean().item()


def _check(torch, name, a, w, got):
    """got vs a float64 reference; cuBLAS bf16 on the same values vs the same reference."""
    ref = a.double() @ w.double().T
    cub = torch.nn.functional.linear(a, w)
    torch.cuda.synchronize()
    assert not torch.isnan(got).any(), f"{name}: NaN in output"
    scale = ref.abs().max().item()
    o_max, o_mean = _errors(torch, got, ref)
    c_max, c_mean = _errors(torch, cub, ref)
    _report(f"gemv {name}: max_abs={o_max:.3e} (/max|ref| {o_max / scale:.3e}) mean_abs="
            f"{o_mean:.3e} | cuBLAS: max {c_max:.3e} (/max|ref| {c_max / scale:.3e}) mean "
            f"{c_mean:.3e} | max|ref|={scale:.3f}")
    # a bound of its own: one bf16 rounding (2^-8 relative, generous for nearest-even's
    # 2^-9) plus an f32 accumulation term at the scale of the row
    bound = ref.abs() * 2.0 ** -8 + scale * 2.0 ** -12 + 1e-6
    bad = (got.double() - ref).abs() > bound
    assert not bad.any(), f"{name}: {int(bad.sum())} elements off, max_abs={o_max}"
    # no worse than cuBLAS (issue 16: "accuracy vs an fp32 reference no worse than cuBLASLt's")
    slack = scale * 2.0 ** -16
    assert o_max <= 1.5 * c_max + slack, f"{name}: max error {o_max} vs cuBLAS {c_max}"
    assert o_mean <= 1.2 * c_mean + slack, f"{name}: mean error {o_mean} vs cuBLAS {c_mean}"


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 4, 8])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_gemv_example_shapes(env, shape, m):
    torch, ok, kern = env
    n, k = SHAPES[shape]
    a, w = _inputs(torch, n, k, m, seed=n + k + m)
    got = _run(torch, kern, a, w)
    _check(torch, f"{shape} n{n} k{k} m{m} NW={ok.gemv_warps(n, k)}", a, w, got)


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,m", ODD)
def test_gemv_odd_shapes(env, n, k, m):
    torch, ok, kern = env
    a, w = _inputs(torch, n, k, m, seed=3 * n + k + m)
    got = _run(torch, kern, a, w)
    _check(torch, f"odd n{n} k{k} m{m} NW={ok.gemv_warps(n, k)}", a, w, got)


@pytest.mark.gpu
@pytest.mark.parametrize("warps", [1, 2, 3, 4, 8, 16])
def test_gemv_every_block_size(env, warps):
    """The result's meaning does not depend on the block size (its last bits may)."""
    torch, ok, kern = env
    a, w = _inputs(torch, 6144, 2560, 8, seed=warps)
    _check(torch, f"qwen3 qkv m8 NW={warps}", a, w, _run(torch, kern, a, w, warps=warps))


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,m", [(6144, 2560, 8), (151936, 2560, 1), (576, 1536, 9)])
def test_gemv_bit_reproducible(env, n, k, m):
    torch, ok, kern = env
    a, w = _inputs(torch, n, k, m, seed=11)
    first = _run(torch, kern, a, w)
    for _ in range(2):
        assert torch.equal(_run(torch, kern, a, w), first)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 9])
@pytest.mark.parametrize("shape", ["qwen3 qkv", "smollm2 qkv", "qwen3 down"])
def test_gemv_early_trigger_has_the_plain_bits(env, shape, m):
    """kern_gemv_et_bf16 (its dependents launched right after its wait; kern-gen's choice
    before the decode attention) computes kern_gemv_bf16's bits."""
    torch, ok, kern = env
    n, k = SHAPES[shape]
    a, w = _inputs(torch, n, k, m, seed=7 * m + n)
    assert torch.equal(_run(torch, kern, a, w, symbol="kern_gemv_et_bf16"),
                       _run(torch, kern, a, w))


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(2560, 9728), (960, 576)])
def test_gemv_rows_are_independent(env, n, k):
    """Row i of an m-row call has the bits of a 1-row call on row i alone (ABI.md 4: a row's
    result does not depend on m or the other rows), in the first and the second y block."""
    torch, ok, kern = env
    a, w = _inputs(torch, n, k, 11, seed=5)
    full = _run(torch, kern, a, w)
    for i in (0, 3, 7, 8, 10):
        assert torch.equal(_run(torch, kern, a[i:i + 1].contiguous(), w)[0], full[i]), i


@pytest.mark.gpu
def test_gemv_reads_only_its_rows(env):
    """NaN rows of W after n and of A after m (in the same allocations) do not reach C."""
    torch, ok, kern = env
    n, k, m = 1000, 576, 3
    a, w = _inputs(torch, n, k, m, seed=2)
    wp = torch.full((n + 16, k), float("nan"), dtype=torch.bfloat16, device="cuda")
    ap = torch.full((m + 8, k), float("nan"), dtype=torch.bfloat16, device="cuda")
    wp[:n], ap[:m] = w, a
    got = _run(torch, kern, ap[:m], wp[:n])
    assert torch.equal(got, _run(torch, kern, a, w))
    _check(torch, "NaN-padded rows n1000 k576 m3", a, w, got)


# ----------------------------------------------------------- programmatic dependent launch

def _pdl_launcher(torch, kern, symbol="kern_gemv_bf16"):
    """``launch(a, w, c)``: the GEMV ``symbol`` with programmatic stream serialization on
    torch's current stream (None when unavailable)."""
    import _own_kernels_gpu as okg
    launch = okg.pdl_launcher()
    if launch is None:
        return None
    fn = kern.fn("gemv.cubin", symbol)

    def gemv(a, w, c):
        m, (n, k) = a.shape[0], w.shape
        launch(fn, (-(-n // 16), -(-m // 8), 1), (32 * okg.gemv_warps(n, k), 1, 1), 0,
               torch.cuda.current_stream().cuda_stream,
               [okg.ptr(a), okg.ptr(w), okg.ptr(c), np.int32(m), np.int32(n), np.int32(k)])

    return gemv


@pytest.mark.gpu
@pytest.mark.parametrize("first", ["kern_gemv_bf16", "kern_gemv_et_bf16"])
@pytest.mark.parametrize("m", [1, 8])
def test_gemv_chain_under_pdl(env, m, first):
    """x -> up (n 9728, k 2560) -> y -> down (n 2560, k 9728) -> z, both launched with PDL:
    the second GEMV starts while the first still computes or stores y (the first triggers
    its dependents after its main loop, or with ``kern_gemv_et_bf16`` right after its wait),
    loads its weights, and must wait for y: z has the bits of the plain launches, repeated
    over NaN-poisoned y."""
    torch, ok, kern = env
    launch = _pdl_launcher(torch, kern)
    launch_first = _pdl_launcher(torch, kern, first)
    if launch is None:
        pytest.skip("no cuLaunchKernelEx / cupy function handle")
    g = torch.Generator(device="cuda").manual_seed(m)
    x = torch.randn((m, 2560), generator=g, device="cuda").to(torch.bfloat16)
    w1 = (torch.randn((9728, 2560), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    w2 = (torch.randn((2560, 9728), generator=g, device="cuda") * 0.05).to(torch.bfloat16)
    y = torch.empty((m, 9728), dtype=torch.bfloat16, device="cuda")
    z = torch.empty((m, 2560), dtype=torch.bfloat16, device="cuda")
    torch.cuda.synchronize()
    kern.gemv(x, w1, y)
    kern.gemv(y, w2, z)
    torch.cuda.synchronize()
    want = z.clone()
    assert not torch.isnan(want).any()
    stream = torch.cuda.Stream()          # PDL on an ordinary stream, not the legacy one
    for _ in range(20):
        with torch.cuda.stream(stream):
            y.fill_(float("nan"))
            z.fill_(float("nan"))
            launch_first(x, w1, y)
            launch(y, w2, z)
        stream.synchronize()
        assert torch.equal(z, want)


# ------------------------------------------------------------ fused variants (ABI.md 4a, 4b)

# (n, k) of the gate / up halves: SmolLM2, Qwen3-4B, and an n that is not a multiple of 16
SILU = [(1536, 576), (9728, 2560), (1000, 584)]


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 9])
@pytest.mark.parametrize("n,k", SILU)
def test_gemv_silu(env, n, k, m):
    """silu(g) * u from one launch: g and u have the bits of the plain GEMV with the same
    block size (rounded to bf16 first), SiLU*mul is f32 math rounded once; against that
    composition within one bf16 step (the kernel's __expf against torch's exp), and against a
    float64 reference of the whole MLP input within the GEMV's own bound."""
    torch, ok, kern = env
    a, w = _inputs(torch, 2 * n, k, m, seed=7 * n + k + m)
    warps = ok.gemv_warps(2 * n, k)
    buf = torch.full((m * n + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")
    kern.gemv_silu(a, w, buf, warps)
    torch.cuda.synchronize()
    assert torch.isnan(buf[m * n:]).all(), "wrote past C[m, n]"
    got = buf[:m * n].view(m, n)
    assert not torch.isnan(got).any()
    g = _run(torch, kern, a, w[:n].contiguous(), warps=warps).float()
    u = _run(torch, kern, a, w[n:].contiguous(), warps=warps).float()
    want = (g * torch.sigmoid(g) * u).to(torch.bfloat16)
    diff = (got.float() - want.float()).abs()
    ulp = want.float().abs().clamp_min(2.0 ** -126) * 2.0 ** -7
    assert (diff <= ulp).all(), f"max diff {diff.max().item()} beyond one bf16 step"
    flips = int((diff > 0).sum())
    _report(f"gemv_silu n{n} k{k} m{m} NW={warps}: {flips} of {m * n} elements one bf16 step "
            f"from the unfused composition")
    assert flips <= max(2, m * n // 500), f"{flips} elements differ from the composition"
    ref_g = a.double() @ w[:n].double().T
    ref_u = a.double() @ w[n:].double().T
    ref = ref_g * torch.sigmoid(ref_g) * ref_u
    cg = torch.nn.functional.linear(a, w[:n]).float()
    cu = torch.nn.functional.linear(a, w[n:]).float()
    cub = (cg * torch.sigmoid(cg) * cu).to(torch.bfloat16)
    o_max, o_mean = _errors(torch, got, ref)
    c_max, c_mean = _errors(torch, cub, ref)
    _report(f"gemv_silu n{n} k{k} m{m} vs float64: max {o_max:.3e} mean {o_mean:.3e} | "
            f"cuBLAS GEMMs + torch SiLU*mul: max {c_max:.3e} mean {c_mean:.3e}")
    slack = ref.abs().max().item() * 2.0 ** -16
    assert o_max <= 1.5 * c_max + slack and o_mean <= 1.2 * c_mean + slack


# (part widths, k): the verify program's q / k / v of the two examples and an odd last part
SPLIT = [((576, 192, 192), 576), ((4096, 1024, 1024), 2560), ((64, 32, 40), 72)]


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 9])
@pytest.mark.parametrize("widths,k", SPLIT)
def test_gemv_split3(env, widths, k, m):
    """One launch over the merged [q; k; v] rows writes each part into its own [m, n_i]
    buffer with the bits of the plain GEMV of that part (same block size), nothing past."""
    torch, ok, kern = env
    n = sum(widths)
    a, w = _inputs(torch, n, k, m, seed=n + 13 * k + m)
    warps = ok.gemv_warps(n, k)
    bufs = [torch.full((m * x + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")
            for x in widths]
    kern.gemv_split3(a, w, bufs, widths, warps)
    torch.cuda.synchronize()
    row = 0
    for x, buf in zip(widths, bufs):
        assert torch.isnan(buf[m * x:]).all(), "wrote past a part"
        want = _run(torch, kern, a, w[row:row + x].contiguous(), warps=warps)
        assert torch.equal(buf[:m * x].view(m, x), want), f"part at row {row}"
        row += x


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,m", [(576, 576, 8), (2560, 2560, 8), (2560, 2560, 1),
                                   (49152, 64, 1), (151936, 64, 1), (1000, 576, 3)])
def test_gemv_acc(env, n, k, m):
    """kern_gemv_acc_bf16 (ABI.md 4c): C += A·Wᵀ in place, against a float64 reference of
    C₀ + A·Wᵀ with the plain GEMV's bound, no worse than cuBLAS's bf16 addmm (β = 1); a
    NaN guard after C stays untouched; C₀ = 0 gives the plain GEMV's bits."""
    torch, _, kern = env
    a, w = _inputs(torch, n, k, m, seed=7 * n + k + m)
    g = torch.Generator(device="cuda").manual_seed(n + m)
    c0 = torch.randn((m, n), generator=g, device="cuda").to(torch.bfloat16)
    buf = torch.full((m * n + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")
    buf[:m * n] = c0.reshape(-1)
    kern.gemv_acc(a, w, buf)
    torch.cuda.synchronize()
    assert torch.isnan(buf[m * n:]).all(), "wrote past C[m, n]"
    got = buf[:m * n].view(m, n)
    ref = c0.double() + a.double() @ w.double().T
    cub = torch.addmm(c0, a, w.T)
    torch.cuda.synchronize()
    scale = ref.abs().max().item()
    o_max, o_mean = _errors(torch, got, ref)
    c_max, c_mean = _errors(torch, cub, ref)
    _report(f"gemv_acc n{n} k{k} m{m}: max_abs={o_max:.3e} mean_abs={o_mean:.3e} | cuBLAS "
            f"addmm: max {c_max:.3e} mean {c_mean:.3e} | max|ref|={scale:.3f}")
    bound = ref.abs() * 2.0 ** -8 + scale * 2.0 ** -12 + 1e-6
    assert not ((got.double() - ref).abs() > bound).any()
    slack = scale * 2.0 ** -16
    assert o_max <= 1.5 * c_max + slack and o_mean <= 1.2 * c_mean + slack
    zero = torch.zeros((m, n), dtype=torch.bfloat16, device="cuda")
    kern.gemv_acc(a, w, zero)
    torch.cuda.synchronize()
    assert torch.equal(zero, _run(torch, kern, a, w))
