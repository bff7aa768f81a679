"""GPU test of ``kern_rope_kv_bf16`` (ABI.md 3d): the rotate-half rope of q and k and the K/V
cache writes of one layer, against a float64 reference of the formula (HF Llama's
``apply_rotary_pos_emb`` with ``rotate_half``, angles ``positions · inv_freq``): q and the
written K rows within one bf16 rounding of it (nearly all equal to its rounding), V rows copied
bit for bit, every other cache row untouched, negative slots counted from the end, slots out of
range writing nothing; ``kern_rope_kv3_bf16`` (ABI.md 3d′, q/k/v in three buffers) bit for bit
equal to it.  Skips cleanly without torch, cupy, a GPU or nvcc."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _own_kernels_gpu import check_rope, rope64 as _rope64  # noqa: E402


@pytest.mark.gpu
@pytest.mark.parametrize("tokens,heads,kv_heads,d", [(1, 9, 3, 64), (8, 9, 3, 64),
                                                     (1, 32, 8, 128), (5, 32, 8, 128)])
def test_rope_kv_matches_the_formula(env, tokens, heads, kv_heads, d):
    _check_formula(env, tokens, heads, kv_heads, d, three_buffers=False)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens,heads,kv_heads,d", [(1, 9, 3, 64), (8, 9, 3, 64),
                                                     (16, 9, 3, 64), (5, 32, 8, 128)])
def test_rope_kv3_matches_the_formula_and_rope_kv(env, tokens, heads, kv_heads, d):
    got3 = _check_formula(env, tokens, heads, kv_heads, d, three_buffers=True)
    got1 = _check_formula(env, tokens, heads, kv_heads, d, three_buffers=False)
    for a, b in zip(got3, got1):
        assert env[0].equal(a, b)


def _check_formula(env, tokens, heads, kv_heads, d, three_buffers):
    """Run one variant on seeded inputs, check it against the formula; (q_out, kc, vc)."""
    torch, _, k = env
    dev, L = "cuda", 64
    g = torch.Generator(device=dev).manual_seed(tokens * 131 + heads + d)
    width = (heads + 2 * kv_heads) * d
    qkv = (3 * torch.randn((tokens, width), generator=g, device=dev)).to(torch.bfloat16)
    pos = torch.randint(0, 8192, (tokens,), generator=g, device=dev)
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=dev).float() / d))
    ang = (inv[:, None] * pos[None, :].float()).contiguous()        # [D/2, T] f32
    slots = torch.randperm(L - 2, generator=g, device=dev)[:tokens] + 1
    if tokens > 1:
        slots[0] = -1                      # counts from the end: row L - 1
    q_out = torch.full((tokens, heads * d), float("nan"), dtype=torch.bfloat16, device=dev)
    kc = torch.full((L, kv_heads, d), 7.0, dtype=torch.bfloat16, device=dev)
    vc = kc.clone()
    q, kk, v = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=1)
    if three_buffers:
        k.rope_kv3(q.contiguous(), kk.contiguous(), v.contiguous(), ang, slots, q_out, kc, vc,
                   heads, kv_heads, d, L)
    else:
        k.rope_kv(qkv, ang, slots, q_out, kc, vc, heads, kv_heads, d, L)
    torch.cuda.synchronize()
    rows = torch.where(slots < 0, slots + L, slots)
    cases = [("q", q_out.view(tokens, heads, d), _rope64(torch, q.view(tokens, heads, d), ang)),
             ("k", kc[rows], _rope64(torch, kk.view(tokens, kv_heads, d), ang))]
    for name, got, ref in cases:
        check_rope(torch, f"rope_kv{'3' if three_buffers else ''} {name} T={tokens} "
                          f"H={heads} KV={kv_heads} D={d}", got, ref)
    assert torch.equal(vc[rows], v.view(tokens, kv_heads, d))
    untouched = torch.ones(L, dtype=torch.bool, device=dev)
    untouched[rows] = False
    assert (kc[untouched] == 7.0).all() and (vc[untouched] == 7.0).all()
    return q_out, kc, vc


@pytest.mark.gpu
def test_rope_kv_slot_out_of_range_writes_no_cache_row(env):
    torch, _, k = env
    dev, L, H, KV, D = "cuda", 16, 9, 3, 64
    qkv = torch.randn((2, (H + 2 * KV) * D), device=dev).to(torch.bfloat16)
    ang = torch.rand((D // 2, 2), device=dev)
    slots = torch.tensor([L, -L - 1], device=dev)
    q_out = torch.zeros((2, H * D), dtype=torch.bfloat16, device=dev)
    kc = torch.full((L, KV, D), 7.0, dtype=torch.bfloat16, device=dev)
    vc = kc.clone()
    k.rope_kv(qkv, ang, slots, q_out, kc, vc, H, KV, D, L)
    torch.cuda.synchronize()
    assert (kc == 7.0).all() and (vc == 7.0).all()
    assert (q_out != 0).any()              # q is still roped: it has no cache row
