"""GPU test of ``kern_rope_kv_norm_bf16`` (ABI.md 3e): Qwen3's per-head q/k RMSNorm, then the
rotate-half rope and the K/V cache writes of one layer, against a float64 reference of HF
Qwen3's formula (``Qwen3RMSNorm`` per head with the layer's weight, then
``apply_rotary_pos_emb``): q and the written K rows within one bf16 rounding of it (nearly
all equal to its rounding), V rows copied bit for bit, other cache rows untouched, negative
slots counted from the end; ``kern_rope_kv3_norm_bf16`` (ABI.md 3e′: q/k/v in three buffers,
q rotated in place or not) bit for bit equal to it.  Skips cleanly without torch, cupy, a GPU
or nvcc."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _own_kernels_gpu import check_rope, rope64 as _rope64  # noqa: E402


def _norm64(torch, x, w, eps):
    """x [T, heads, D] bf16, w [D] bf16 -> float64 per-head RMSNorm times w."""
    x = x.double()
    return w.double() * x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens,heads,kv_heads,d", [(1, 32, 8, 128), (4, 32, 8, 128),
                                                     (1, 9, 3, 64), (3, 16, 2, 128)])
def test_rope_kv_norm_matches_the_formula(env, tokens, heads, kv_heads, d):
    _check(env, tokens, heads, kv_heads, d, "qkv")


@pytest.mark.gpu
@pytest.mark.parametrize("tokens,heads,kv_heads,d", [(1, 32, 8, 128), (8, 32, 8, 128),
                                                     (16, 32, 8, 128), (5, 9, 3, 64)])
def test_rope_kv3_norm_matches_the_formula_and_rope_kv_norm(env, tokens, heads, kv_heads, d):
    ref = _check(env, tokens, heads, kv_heads, d, "qkv")
    for mode in ("three", "in_place"):
        got = _check(env, tokens, heads, kv_heads, d, mode)
        for a, b in zip(got, ref):
            assert env[0].equal(a, b), mode


def _check(env, tokens, heads, kv_heads, d, mode):
    """Run one variant (``qkv``: one merged buffer; ``three``: q, k, v buffers; ``in_place``:
    three, q rotated in place) on seeded inputs, check it against the formula; (q_out, kc, vc)."""
    torch, _, k = env
    dev, L, eps = "cuda", 64, 1e-6
    g = torch.Generator(device=dev).manual_seed(tokens * 17 + heads + d)
    width = (heads + 2 * kv_heads) * d
    qkv = (3 * torch.randn((tokens, width), generator=g, device=dev)).to(torch.bfloat16)
    q_w = (1 + 0.5 * torch.randn((d,), generator=g, device=dev)).to(torch.bfloat16)
    k_w = (1 + 0.5 * torch.randn((d,), generator=g, device=dev)).to(torch.bfloat16)
    pos = torch.randint(0, 40960, (tokens,), generator=g, device=dev)
    inv = 1.0 / (1e6 ** (torch.arange(0, d, 2, device=dev).float() / d))
    ang = (inv[:, None] * pos[None, :].float()).contiguous()        # [D/2, T] f32
    slots = torch.randperm(L - 2, generator=g, device=dev)[:tokens] + 1
    if tokens > 1:
        slots[0] = -1
    q_out = torch.full((tokens, heads * d), float("nan"), dtype=torch.bfloat16, device=dev)
    kc = torch.full((L, kv_heads, d), 7.0, dtype=torch.bfloat16, device=dev)
    vc = kc.clone()
    q, kk, v = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=1)
    if mode == "qkv":
        k.rope_kv_norm(qkv, q_w, k_w, ang, slots, q_out, kc, vc, heads, kv_heads, d, L, eps)
    else:
        q3 = q.clone(memory_format=torch.contiguous_format)   # a copy even when T = 1
        if mode == "in_place":
            q_out = q3
        k.rope_kv3_norm(q3, kk.contiguous(), v.contiguous(), q_w, k_w, ang, slots, q_out, kc, vc,
                        heads, kv_heads, d, L, eps)
    torch.cuda.synchronize()
    rows = torch.where(slots < 0, slots + L, slots)
    ref_q = _rope64(torch, _norm64(torch, q.view(tokens, heads, d), q_w, eps), ang)
    ref_k = _rope64(torch, _norm64(torch, kk.view(tokens, kv_heads, d), k_w, eps), ang)
    for name, got, ref in (("q", q_out.view(tokens, heads, d), ref_q), ("k", kc[rows], ref_k)):
        check_rope(torch, f"rope_kv_norm ({mode}) {name} T={tokens} H={heads} KV={kv_heads} "
                          f"D={d}", got, ref)
    assert torch.equal(vc[rows], v.view(tokens, kv_heads, d))
    untouched = torch.ones(L, dtype=torch.bool, device=dev)
    untouched[rows] = False
    assert (kc[untouched] == 7.0).all() and (vc[untouched] == 7.0).all()
    return q_out, kc, vc
