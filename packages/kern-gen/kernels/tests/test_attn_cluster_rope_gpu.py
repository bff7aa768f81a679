"""GPU tests of the cluster decode attention with the layer's rope and K/V cache writes folded
in (``attn_decode_cluster.cu``, ABI.md 3a‴, kern-gen's default decode attention): bit for bit
against the two launches it replaces, ``kern_rope_kv_bf16`` (Llama) or
``kern_rope_kv_norm_bf16`` (Qwen3's per-head q/k RMSNorm first) and then
``kern_attn_decode_cluster_bf16``: the same output bits and the same K/V caches (every row,
the new key's included), for rows of one to 4096 keys (the new key in each of the cluster's
8 splits, and as the only key), several sequences a launch, a negative slot.  The caches'
new-key rows start as NaN, so the folded kernel must attend to the key it rotated, not to
the cache.  Skips cleanly without torch, cupy, a GPU or nvcc."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

CASES = [
    # heads, kv_heads, d, norm, kv_lens of the launch's rows (one sequence each)
    (9, 3, 64, False, [1]),
    (9, 3, 64, False, [144]),
    (9, 3, 64, False, [17, 1000, 9]),
    (9, 3, 64, False, [4096]),
    (32, 8, 128, True, [1]),
    (32, 8, 128, True, [144]),
    (32, 8, 128, True, [2, 1016, 64]),
    (32, 8, 128, True, [4096]),
    (32, 8, 128, False, [300]),
    (9, 3, 64, True, [77]),
    (16, 8, 64, False, [33, 5]),     # G = 2
    (4, 4, 128, True, [129]),        # G = 1
]


def _bits(torch, x):
    return x.contiguous().view(torch.int16)


def decode_inputs(torch, ok, heads, kv_heads, d, lens, seed):
    """One decode launch's inputs, seeded: rows of ``lens`` keys in contiguous pages of
    random bf16 K/V caches, each row's new-key slot, the qkv rows, the q/k norm weights, the
    angles [D/2, T] of positions ``lens - 1`` and kv_lens (also test_attn_push_merge_gpu.py)."""
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(seed)
    pages = ok.contiguous_pages(torch, lens, dev)
    table = ok.table_of(torch, pages, dev, width=ok.pages_for(max(lens)) + 1)
    n_slots = sum(len(p) for p in pages) * 16 + 16
    kc = torch.randn((n_slots, kv_heads, d), generator=g, device=dev).to(torch.bfloat16)
    vc = torch.randn((n_slots, kv_heads, d), generator=g, device=dev).to(torch.bfloat16)
    slots = torch.stack([ok.key_slots(torch, p, L)[L - 1] for p, L in zip(pages, lens)])
    width = (heads + 2 * kv_heads) * d
    qkv = (2 * torch.randn((len(lens), width), generator=g, device=dev)).to(torch.bfloat16)
    q_w = (1 + 0.5 * torch.randn((d,), generator=g, device=dev)).to(torch.bfloat16)
    k_w = (1 + 0.5 * torch.randn((d,), generator=g, device=dev)).to(torch.bfloat16)
    pos = torch.tensor([L - 1 for L in lens], device=dev)
    inv = 1.0 / (1e4 ** (torch.arange(0, d, 2, device=dev).float() / d))
    ang = (inv[:, None] * pos[None, :].float()).contiguous()           # [D/2, T] f32
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
    return SimpleNamespace(table=table, n_slots=n_slots, kc=kc, vc=vc, slots=slots,
                           width=width, qkv=qkv, q_w=q_w, k_w=k_w, ang=ang, kv_lens=kv_lens,
                           scale=1 / math.sqrt(d))


@pytest.mark.gpu
@pytest.mark.parametrize("heads,kv_heads,d,norm,lens", CASES)
def test_folded_rope_equals_the_two_launches(env, heads, kv_heads, d, norm, lens):
    torch, ok, k = env
    dev, eps = "cuda", 1e-6
    T = len(lens)
    x = decode_inputs(torch, ok, heads, kv_heads, d, lens, sum(lens) * 7 + heads + d + norm)
    table, n_slots, kc, vc, slots = x.table, x.n_slots, x.kc, x.vc, x.slots
    qkv, q_w, k_w, ang, kv_lens, scale = x.qkv, x.q_w, x.k_w, x.ang, x.kv_lens, x.scale
    kc[slots] = float("nan")                 # the new keys' rows: written by the kernels
    vc[slots] = float("nan")
    if T > 1:
        slots[0] -= n_slots                  # negative: counted from the cache's end

    ka, va = kc.clone(), vc.clone()          # the two launches
    q_out = torch.full((T, heads * d), float("nan"), dtype=torch.bfloat16, device=dev)
    if norm:
        k.rope_kv_norm(qkv, q_w, k_w, ang, slots, q_out, ka, va, heads, kv_heads, d, n_slots,
                       eps)
    else:
        k.rope_kv(qkv, ang, slots, q_out, ka, va, heads, kv_heads, d, n_slots)
    out_a = torch.full((T, heads, d), float("nan"), dtype=torch.bfloat16, device=dev)
    k.attn_decode_cluster(q_out, heads * d, ka, va, kv_lens, table, out_a, heads, kv_heads,
                          scale, T)
    kb, vb = kc.clone(), vc.clone()          # folded
    out_b = torch.full((T, heads, d), float("nan"), dtype=torch.bfloat16, device=dev)
    k.attn_decode_cluster_rope(qkv, ang, slots, kb, vb, kv_lens, table, out_b, heads, kv_heads,
                               scale, n_slots, *((q_w, k_w, eps) if norm else ()))
    torch.cuda.synchronize()
    assert not torch.isnan(out_a.float()).any(), "the two launches left NaN"
    assert torch.equal(_bits(torch, out_b), _bits(torch, out_a))
    assert torch.equal(_bits(torch, kb), _bits(torch, ka))
    assert torch.equal(_bits(torch, vb), _bits(torch, va))
