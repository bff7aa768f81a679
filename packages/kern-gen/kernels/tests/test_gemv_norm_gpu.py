"""GPU tests of the RMSNorm split between GEMVs (ABI.md 4e): ``kern_gemv_res_bf16`` against
the plain GEMV plus an f32 add (bit for bit) and torch's sums of squares; the normed rows of
``kern_gemv_norm_bf16`` and ``kern_gemv_rnorm[_silu]_bf16`` against the captured Inductor
arithmetic written in torch (``bf16(g * (r * rsqrt(mean(r^2) + eps)))``, f32), observed
through an identity W; their C against the plain GEMVs of those rows.

Marked ``gpu``; skips without torch, cupy, a GPU or nvcc.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gemv_gpu import GUARD, _check, env  # noqa: E402,F401  (the module's fixture)

# (n, k, eps): the decode GEMVs after a norm (qkv, gate/up merged, lm_head)
AFTER = {"smollm2 qkv": (960, 576, 1e-5), "smollm2 gate_up": (3072, 576, 1e-5),
         "smollm2 lm_head": (49152, 576, 1e-5), "qwen3 qkv": (6144, 2560, 1e-6),
         "qwen3 gate_up": (19456, 2560, 1e-6), "qwen3 lm_head": (151936, 2560, 1e-6)}
# (n, k): the GEMMs before a norm (o_proj, down_proj)
BEFORE = {"smollm2 o": (576, 576), "smollm2 down": (576, 1536), "qwen3 o": (2560, 4096),
          "qwen3 down": (2560, 9728)}


def _normed(torch, r, g, eps):
    """The captured kernels' arithmetic: f32 throughout, one rounding."""
    rstd = torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps)
    return (g.float() * (r * rstd)).to(torch.bfloat16)


def _parts(torch, r):
    """Sums of squares of r [m, k] by 16 columns: [m, ceil(k / 16)]."""
    return r.pow(2).view(r.shape[0], -1, 16).sum(-1)


def _rand(torch, shape, seed, scale=1.0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=gen, device="cuda") * scale


def _nan(torch, n, dtype):
    return torch.full((n + GUARD,), float("nan"), dtype=dtype, device="cuda")


def _plain(torch, kern, a, w, silu):
    m = a.shape[0]
    n = w.shape[0] // 2 if silu else w.shape[0]
    c = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    if silu:
        kern.gemv_silu(a, w, c, warps=__import__("_own_kernels_gpu").gemv_warps(*w.shape))
    else:
        kern.gemv(a, w, c)
    torch.cuda.synchronize()
    return c


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("shape", list(BEFORE))
def test_res_adds_the_gemv_bits_and_sums_the_squares(env, shape, m):
    torch, ok, kern = env
    n, k = BEFORE[shape]
    a = _rand(torch, (m, k), n + m).to(torch.bfloat16)
    w = _rand(torch, (n, k), k, 0.05).to(torch.bfloat16)
    r0 = _rand(torch, (m, n), 7, 3.0)
    r = _nan(torch, m * n, torch.float32)
    r[:m * n] = r0.flatten()
    parts = _nan(torch, m * (n // 16), torch.float32)
    kern.gemv_res(a, w, r[:m * n].view(m, n), parts[:m * (n // 16)].view(m, n // 16))
    torch.cuda.synchronize()
    assert torch.isnan(r[m * n:]).all() and torch.isnan(parts[m * (n // 16):]).all()
    got = r[:m * n].view(m, n)
    want = r0 + _plain(torch, kern, a, w, False).float()
    assert torch.equal(got, want), f"{shape}: r is not r + f32(the plain GEMV's bits)"
    torch.testing.assert_close(parts[:m * (n // 16)].view(m, -1), _parts(torch, want),
                               rtol=1e-6, atol=0)


def _identity_w(torch, n, k, seed):
    """W [n, k] whose first k rows are the identity: C[:, :k] is the normed A itself."""
    w = _rand(torch, (n, k), seed, 0.05).to(torch.bfloat16)
    w[:k] = torch.eye(k, device="cuda").to(torch.bfloat16)
    return w


def _ties(got, want, m, k):
    """The normed rows equal the reference but for rare last-bit ties of the rstd (the sums
    of squares are added in another order), each one bf16 step at most."""
    diff = got != want
    assert int(diff.sum()) <= max(2, m * k // 2000), f"{int(diff.sum())} of {m * k} differ"
    if diff.any():
        step = (got.float() - want.float()).abs()[diff] / want.float().abs()[diff]
        assert (step <= 2 ** -7).all(), step.max().item()


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,eps,m", [(960, 576, 1e-5, 8), (6144, 2560, 1e-6, 3)])
def test_norm0_rows_and_the_stream_start(env, n, k, eps, m):
    torch, ok, kern = env
    x = _rand(torch, (m, k), k + m, 3.0).to(torch.bfloat16)
    g = (1 + _rand(torch, (k,), 5, 0.2)).to(torch.bfloat16)
    w = _identity_w(torch, n, k, n)
    c = _nan(torch, m * n, torch.bfloat16)
    xo = _nan(torch, m * k, torch.float32)
    kern.gemv_norm(x, g, xo[:m * k].view(m, k), w, c[:m * n].view(m, n), eps)
    torch.cuda.synchronize()
    assert torch.isnan(c[m * n:]).all() and torch.isnan(xo[m * k:]).all()
    assert torch.equal(xo[:m * k].view(m, k), x.float())
    _ties(c[:m * n].view(m, n)[:, :k], _normed(torch, x.float(), g, eps), m, k)


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,eps,m", [(960, 576, 1e-5, 8), (6144, 2560, 1e-6, 3)])
def test_rnorm_rows(env, n, k, eps, m):
    torch, ok, kern = env
    r = _rand(torch, (m, k), k + 2 * m, 3.0)
    g = (1 + _rand(torch, (k,), 6, 0.2)).to(torch.bfloat16)
    w = _identity_w(torch, n, k, n + 1)
    c = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    kern.gemv_rnorm(r, _parts(torch, r).contiguous(), g, w, c, eps)
    torch.cuda.synchronize()
    _ties(c[:, :k], _normed(torch, r, g, eps), m, k)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", list(AFTER))
def test_rnorm_gemv_is_the_plain_gemv_of_the_normed_rows(env, shape):
    torch, ok, kern = env
    n, k, eps = AFTER[shape]
    silu = "gate_up" in shape
    m = 1 if k > 1024 else 3
    r = _rand(torch, (m, k), n, 3.0)
    g = (1 + _rand(torch, (k,), 8, 0.2)).to(torch.bfloat16)
    w = _rand(torch, (n, k), k + 1, 0.05).to(torch.bfloat16)
    out_n = n // 2 if silu else n
    c = _nan(torch, m * out_n, torch.bfloat16)
    kern.gemv_rnorm(r, _parts(torch, r).contiguous(), g, w, c[:m * out_n].view(m, out_n), eps,
                    silu=silu)
    torch.cuda.synchronize()
    assert torch.isnan(c[m * out_n:]).all(), "wrote past C"
    got = c[:m * out_n].view(m, out_n)
    a = _normed(torch, r, g, eps)
    if not silu:                # the float64 bound of the plain GEMV on the reference rows
        _check(torch, f"rnorm {shape} m{m}", a, w, got)
    plain = _plain(torch, kern, a, w, silu)
    rel = ((got.float() - plain.float()).abs().max() / plain.float().abs().max()).item()
    assert rel < 2 ** -7, f"{shape}: C differs from the plain GEMV of the normed rows: {rel}"


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 3, 9])
def test_the_early_trigger_twin_has_the_same_bits(env, m):
    """kern_gemv_rnorm_et_bf16 (dependents launched right after its wait; kern-gen's choice
    before the decode attention under --fuse-norm) computes kern_gemv_rnorm_bf16's bits."""
    torch, ok, kern = env
    n, k, eps = AFTER["qwen3 qkv"] if m == 1 else AFTER["smollm2 qkv"]
    r = _rand(torch, (m, k), 11 + m, 3.0)
    parts = _parts(torch, r).contiguous()
    g = (1 + _rand(torch, (k,), 12, 0.2)).to(torch.bfloat16)
    w = _rand(torch, (n, k), 13, 0.05).to(torch.bfloat16)
    got = {}
    for early in (False, True):
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        kern.gemv_rnorm(r, parts, g, w, c, eps, early=early)
        torch.cuda.synchronize()
        got[early] = c
    assert not torch.isnan(got[False]).any()
    assert torch.equal(got[True], got[False])


@pytest.mark.gpu
def test_reproducible_and_rows_independent(env):
    torch, ok, kern = env
    n, k, eps = AFTER["smollm2 qkv"]
    r = _rand(torch, (3, k), 1, 3.0)
    parts = _parts(torch, r).contiguous()
    g = (1 + _rand(torch, (k,), 2, 0.2)).to(torch.bfloat16)
    w = _rand(torch, (n, k), 3, 0.05).to(torch.bfloat16)

    def run(rr, pp):
        c = torch.empty((rr.shape[0], n), dtype=torch.bfloat16, device="cuda")
        kern.gemv_rnorm(rr, pp, g, w, c, eps)
        torch.cuda.synchronize()
        return c

    first = run(r, parts)
    assert torch.equal(run(r, parts), first)
    for i in range(3):
        assert torch.equal(run(r[i:i + 1].contiguous(), parts[i:i + 1].contiguous())[0],
                           first[i]), i
