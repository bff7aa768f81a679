"""GPU tests of the own RMSNorm launches (ABI.md 4g, ``kern-gen --own-norm``): the f32
residual stream exactly (``r = f32(x)``, ``r += f32(d)``: one f32 rounding each, so torch's
bits), the normed row against the captured Inductor arithmetic written in torch (f32, one
rounding: ``test_gemv_norm_gpu._normed``) up to last-bit ties of the rstd, nothing written
past the row; and a PDL chain GEMV -> norm -> GEMV (the norm lets the second GEMV launch right
after its wait) with the bits of the plain launches over NaN-poisoned buffers.

Marked ``gpu``; skips without torch, cupy, a GPU or nvcc.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_gemv_gpu import _pdl_launcher  # noqa: E402
from test_gemv_norm_gpu import _nan, _normed, _rand, _ties  # noqa: E402

# (k, eps): SmolLM2-135M and the Qwen3-4B shape, and the widest row a block holds
ROWS = [(576, 1e-5), (2560, 1e-6), (8192, 1e-6)]


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("k,eps", ROWS)
@pytest.mark.parametrize("first", [True, False])
def test_the_stream_and_the_normed_row(env, first, k, eps, m):
    torch, ok, kern = env
    src = _rand(torch, (m, k), k + m, 3.0).to(torch.bfloat16)
    g = (1 + _rand(torch, (k,), 5, 0.2)).to(torch.bfloat16)
    r0 = _rand(torch, (m, k), 7, 3.0)
    r = _nan(torch, m * k, torch.float32)
    if not first:
        r[:m * k] = r0.flatten()
    out = _nan(torch, m * k, torch.bfloat16)
    kern.rmsnorm(first, src, r[:m * k].view(m, k), g, out[:m * k].view(m, k), eps)
    torch.cuda.synchronize()
    assert torch.isnan(r[m * k:]).all() and torch.isnan(out[m * k:]).all(), "wrote past the rows"
    want_r = src.float() if first else r0 + src.float()
    assert torch.equal(r[:m * k].view(m, k), want_r)
    _ties(out[:m * k].view(m, k), _normed(torch, want_r, g, eps), m, k)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [576, 2560])
def test_a_pdl_chain_through_the_norm(env, k):
    """o (n k, k 4096) -> d -> norm_add -> a -> qkv (n 3 k, k k), every launch after the first
    with PDL: the norm lets the qkv GEMV launch before its own wait, whose blocks then
    load W while the norm runs and must wait for a; r, a and the qkv output have the bits of
    the plain launches, 20 times over NaN-poisoned d, a and c."""
    torch, ok, kern = env
    gemv = _pdl_launcher(torch, kern)
    if gemv is None:
        pytest.skip("no cuLaunchKernelEx / cupy function handle")
    launch = ok.pdl_launcher()
    gen = torch.Generator(device="cuda").manual_seed(k)
    x = torch.randn((1, 4096), generator=gen, device="cuda").to(torch.bfloat16)
    wo = (torch.randn((k, 4096), generator=gen, device="cuda") * 0.05).to(torch.bfloat16)
    wq = (torch.randn((3 * k, k), generator=gen, device="cuda") * 0.05).to(torch.bfloat16)
    g = (1 + torch.randn((k,), generator=gen, device="cuda") * 0.2).to(torch.bfloat16)
    r0 = torch.randn((1, k), generator=gen, device="cuda") * 3
    d = torch.empty((1, k), dtype=torch.bfloat16, device="cuda")
    a = torch.empty_like(d)
    c = torch.empty((1, 3 * k), dtype=torch.bfloat16, device="cuda")
    r = r0.clone()
    kern.gemv(x, wo, d)
    kern.rmsnorm(False, d, r, g, a, 1e-6)
    kern.gemv(a, wq, c)
    torch.cuda.synchronize()
    want = (r.clone(), a.clone(), c.clone())
    assert not torch.isnan(want[2]).any()
    norm = kern.fn("rmsnorm.cubin", "kern_rmsnorm_add_bf16")
    stream = torch.cuda.Stream()          # PDL on an ordinary stream, not the legacy one
    for _ in range(20):
        with torch.cuda.stream(stream):
            r.copy_(r0)
            for t in (d, a, c):
                t.fill_(float("nan"))
            gemv(x, wo, d)
            launch(norm, (1, 1, 1), (32 * -(-k // 256), 1, 1), 0,
                   torch.cuda.current_stream().cuda_stream,
                   [ok.ptr(d), ok.ptr(r), ok.ptr(g), ok.ptr(a), np.int32(k), np.float32(1e-6)])
            gemv(a, wq, c)
        stream.synchronize()
        assert torch.equal(r, want[0]) and torch.equal(a, want[1]) and torch.equal(c, want[2])
