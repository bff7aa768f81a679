"""The draft's batched training forward against a per-block reference written from
docs/dspark.md in float64, and the block mask's isolation (context t < p, own block only)."""

from __future__ import annotations

import math

import pytest
import torch

from ktrain_helpers import draft as make_draft
from kern_train.dspark.model import block_mask


def rms(x, w, eps):
    return w * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def rope(x, pos, theta):
    """x [n, heads, D] at positions pos [n]: the rotate-half rope, written out."""
    D = x.shape[-1]
    out = torch.empty_like(x)
    for i in range(D // 2):
        ang = pos[:, None] * theta ** (-2 * i / D)
        c, s = torch.cos(ang), torch.sin(ang)
        a, b = x[..., i], x[..., i + D // 2]
        out[..., i] = a * c - b * s
        out[..., i + D // 2] = b * c + a * s
    return out


def reference_block(d, taps, tokens, p):
    """Logits [B, V] of the block anchored at p, from the contract's text, float64."""
    g, cfg = d.g, d.cfg
    P = {k: v.double() for k, v in d.state_dict().items()}
    E, W = d.embed.double(), d.lm_head.double()
    H, G, D, B = g.heads, g.kv_heads, g.head_dim, cfg.block
    c = rms(taps[:p].double() @ P["fc.weight"].T, P["hidden_norm.weight"], g.eps)
    ids = torch.tensor([int(tokens[p])] + [cfg.mask_token_id] * (B - 1))
    x = E[ids]
    pos_b = torch.arange(p, p + B, dtype=torch.float64)
    pos_c = torch.arange(p, dtype=torch.float64)
    for j in range(cfg.layers):
        L = lambda n: P[f"layers.{j}.{n}"]  # noqa: E731
        wq, wk, wv = L("self_attn.qkv_proj.weight").split([H * D, G * D, G * D])
        u = rms(x, L("input_layernorm.weight"), g.eps)
        q, kb, vb = (u @ wq.T).view(B, H, D), (u @ wk.T).view(B, G, D), (u @ wv.T).view(B, G, D)
        kc, vc = (c @ wk.T).view(p, G, D), (c @ wv.T).view(p, G, D)
        if g.family == "qwen3":
            q = rms(q, L("self_attn.q_norm.weight"), g.eps)
            kb = rms(kb, L("self_attn.k_norm.weight"), g.eps)
            kc = rms(kc, L("self_attn.k_norm.weight"), g.eps)
        q, kb, kc = rope(q, pos_b, g.rope_theta), rope(kb, pos_b, g.rope_theta), \
            rope(kc, pos_c, g.rope_theta)
        K, V = torch.cat([kc, kb]), torch.cat([vc, vb])
        att = torch.empty(B, H, D, dtype=torch.float64)
        for h in range(H):
            kvh = h // (H // G)
            s = q[:, h] @ K[:, kvh].T / math.sqrt(D)
            att[:, h] = torch.softmax(s, -1) @ V[:, kvh]
        x = x + att.reshape(B, H * D) @ L("self_attn.o_proj.weight").T
        v = rms(x, L("post_attention_layernorm.weight"), g.eps)
        gate, up = (v @ L("mlp.gate_up_proj.weight").T).chunk(2, -1)
        x = x + (torch.nn.functional.silu(gate) * up) @ L("mlp.down_proj.weight").T
    base = rms(x, P["norm.weight"], g.eps) @ W.T
    prev = tokens[p:p + B].long()
    return base + P["markov_w1.weight"][prev] @ P["markov_w2.weight"].T


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_batched_forward_matches_the_per_block_reference(family):
    d = make_draft(family)
    gen = torch.Generator().manual_seed(5)
    S, T = 2, 30
    taps = torch.randn(S, T, 5 * d.g.hidden, generator=gen)
    tokens = torch.randint(0, d.g.vocab, (S, T), generator=gen)
    anchors = torch.tensor([[3, 10, 20], [1, 15, 22]])
    with torch.no_grad():
        got = d(taps, tokens, anchors)
    assert got.shape == (S, 3, 7, d.g.vocab) and got.dtype == torch.float32
    for s in range(S):
        for n in range(3):
            want = reference_block(d, taps[s], tokens[s], int(anchors[s, n]))
            torch.testing.assert_close(got[s, n].double(), want, atol=2e-4, rtol=1e-4)


def test_qk_norm_is_a_flag():
    assert not hasattr(make_draft("llama").layers[0].self_attn, "q_norm")
    a = make_draft("qwen3").layers[0].self_attn
    assert a.q_norm.weight.shape == (8,) and a.k_norm.weight.shape == (8,)


def test_block_mask():
    m = block_mask(torch.tensor([[2, 5]]), T=6, B=3)
    assert m.shape == (1, 6, 12)
    for r in range(6):
        n = r // 3
        p = [2, 5][n]
        assert m[0, r, :6].tolist() == [t < p for t in range(6)]
        assert m[0, r, 6:].tolist() == [c // 3 == n for c in range(6)]


def test_a_block_sees_only_its_context_and_itself():
    d = make_draft()
    gen = torch.Generator().manual_seed(1)
    taps = torch.randn(1, 24, 5 * d.g.hidden, generator=gen)
    tokens = torch.randint(0, d.g.vocab, (1, 24), generator=gen)
    with torch.no_grad():
        base = d(taps, tokens, torch.tensor([[4, 12]]))
        later = taps.clone()
        later[:, 12:] += 1.0          # context at or after the second anchor
        same = d(later, tokens, torch.tensor([[4, 12]]))
        alone = d(taps, tokens, torch.tensor([[12]]))
        earlier = taps.clone()
        earlier[:, 11] += 1.0         # context just before it
        moved = d(earlier, tokens, torch.tensor([[4, 12]]))
    torch.testing.assert_close(same, base)
    torch.testing.assert_close(alone[:, 0], base[:, 1])   # the other block changes nothing
    assert not torch.allclose(moved[:, 1], base[:, 1])
    torch.testing.assert_close(moved[:, 0], base[:, 0])
