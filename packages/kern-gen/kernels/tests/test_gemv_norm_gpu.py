"""GPU tests of the GEMVs with the RMSNorm prologue (``kern_gemv_norm_bf16``,
``kern_gemv_norm_silu_bf16``, ABI.md 4e) against HF's arithmetic written in torch: the
residual ``xo`` bit for bit, ``C`` within the plain GEMV's float64 bound of the reference's
normed rows, and equal to the plain GEMV of those rows wherever the two normed rows agree.

Marked ``gpu``; skips without torch, cupy, a GPU or nvcc.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gemv_gpu import GUARD, _check, env  # noqa: E402,F401  (the module's fixture)

# name -> (n, k, eps): the decode GEMVs kern-gen fuses a norm into (qkv, gate/up, lm_head)
SHAPES = {
    "smollm2 qkv": (960, 576, 1e-5), "smollm2 gate_up": (3072, 576, 1e-5),
    "smollm2 lm_head": (49152, 576, 1e-5), "qwen3 qkv": (6144, 2560, 1e-6),
    "qwen3 gate_up": (19456, 2560, 1e-6), "qwen3 lm_head": (151936, 2560, 1e-6),
}


def _hf_norm(torch, r, g, eps):
    """HF's LlamaRMSNorm / Qwen3RMSNorm of bf16 rows ``r`` with weight ``g``."""
    h = r.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return g * h.to(torch.bfloat16)


def _inputs(torch, k, m, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn((m, k), generator=gen, device="cuda") * 3).to(torch.bfloat16)
    d = torch.randn((m, k), generator=gen, device="cuda").to(torch.bfloat16)
    g = (1 + 0.2 * torch.randn((k,), generator=gen, device="cuda")).to(torch.bfloat16)
    return x, d, g


def _run(torch, kern, x, d, g, w, add, eps, silu):
    m, k = x.shape
    n = w.shape[0] // 2 if silu else w.shape[0]
    c = torch.full((m * n + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")
    xo = torch.full((m * k + GUARD,), float("nan"), dtype=torch.bfloat16, device="cuda")
    kern.gemv_norm(x, d, g, xo, w, c, add, eps, silu=silu)
    torch.cuda.synchronize()
    assert torch.isnan(c[m * n:]).all() and torch.isnan(xo[m * k:]).all(), "wrote past C / xo"
    return xo[:m * k].view(m, k), c[:m * n].view(m, n)


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
@pytest.mark.parametrize("add", [1, 0])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_gemv_norm_against_hf_arithmetic(env, shape, add):
    torch, ok, kern = env
    n, k, eps = SHAPES[shape]
    silu = "gate_up" in shape
    m = 1 if k > 1024 else 3          # ABI.md 4e: a block's rows x k <= 8192
    x, d, g = _inputs(torch, k, m, seed=n + k + add)
    gen = torch.Generator(device="cuda").manual_seed(k)
    w = (torch.randn((n, k), generator=gen, device="cuda") * 0.05).to(torch.bfloat16)
    xo, c = _run(torch, kern, x, d, g, w, add, eps, silu)
    r = (x.float() + d.float()).to(torch.bfloat16) if add else x
    assert torch.equal(xo, r), f"{shape}: the residual is not bf16(x + d)"
    a = _hf_norm(torch, r, g, eps)
    plain = _plain(torch, kern, a, w, silu)
    if not silu:                      # the float64 bound of the plain GEMV on HF's rows
        _check(torch, f"norm {shape} m{m} add{add}", a, w, c)
    # C is the plain GEMV of the kernel's own normed rows, which equal HF's but for rare
    # rounding ties of the rstd's last bit (test below): C is that GEMV's up to those
    rel = ((c.float() - plain.float()).abs().max() / plain.float().abs().max()).item()
    assert rel < 2 ** -7, f"{shape}: C differs from the plain GEMV of HF's rows by {rel:.3e}"


@pytest.mark.gpu
@pytest.mark.parametrize("n,k,eps,m", [(960, 576, 1e-5, 8), (6144, 2560, 1e-6, 3)])
def test_gemv_norm_rows_are_hf_rows(env, n, k, eps, m):
    """With W's first k rows the identity, C[:, :k] is the kernel's normed A itself (one
    nonzero term a dot product): equal to HF's rows but for at most a few elements one bf16
    step apart (the rstd's last bit: the sums of squares are added in another order)."""
    torch, ok, kern = env
    x, d, g = _inputs(torch, k, m, seed=k + m)
    w = (torch.randn((n, k), device="cuda") * 0.05).to(torch.bfloat16)
    w[:k] = torch.eye(k, device="cuda").to(torch.bfloat16)
    _, c = _run(torch, kern, x, d, g, w, 1, eps, False)
    a = _hf_norm(torch, (x.float() + d.float()).to(torch.bfloat16), g, eps)
    diff = c[:, :k] != a
    assert int(diff.sum()) <= max(2, m * k // 2000), f"{int(diff.sum())} of {m * k} differ"
    if diff.any():
        step = (c[:, :k].float() - a.float()).abs()[diff] / a.float().abs()[diff]
        assert (step <= 2 ** -7).all(), step.max().item()


@pytest.mark.gpu
def test_gemv_norm_reproducible_and_rows_independent(env):
    """The same bits on every launch, and row i of a 3-row call equals a 1-row call on it."""
    torch, ok, kern = env
    n, k, eps = SHAPES["smollm2 qkv"]
    x, d, g = _inputs(torch, k, 3, seed=7)
    w = (torch.randn((n, k), device="cuda") * 0.05).to(torch.bfloat16)
    xo, c = _run(torch, kern, x, d, g, w, 1, eps, False)
    for _ in range(2):
        xo2, c2 = _run(torch, kern, x, d, g, w, 1, eps, False)
        assert torch.equal(c2, c) and torch.equal(xo2, xo)
    for i in range(3):
        one = _run(torch, kern, x[i:i + 1].contiguous(), d[i:i + 1].contiguous(), g, w, 1,
                   eps, False)[1]
        assert torch.equal(one[0], c[i]), i
