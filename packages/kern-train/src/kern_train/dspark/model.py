"""The DSpark draft in torch, exactly the math of docs/dspark.md ("The draft model").

Shapes: S sequences, T context positions, N blocks (anchors) per sequence, B = 7 rows per block,
R = N·B block rows per sequence; d hidden, H/G q/kv heads, D head dim, V vocab, r Markov rank.

Training runs every block of a sequence at once: the block rows of all N anchors are one row
set [S, R, d] attending to a key set ``[context (T) | block rows (R)]`` through a dense boolean
mask: row (n, k) sees context t < anchor_n and the B rows of block n (non-causal inside it).

Module names follow the contract's tensor names (``layers.{j}.self_attn.qkv_proj`` …) so
:mod:`.export` only prefixes ``draft.`` and splits ``fc`` (one ``[d, 5d]`` linear here: the
concatenated taps times ``[W_fc,0 | … | W_fc,4]``, the same sum Σ_i h^(i) W_fc,iᵀ).
The target's embedding and lm_head are frozen buffers, never parameters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import TAPS, DraftConfig, Geometry


class RMSNorm(nn.Module):
    """HF Llama's RMSNorm: normalise in fp32, cast back, then scale."""

    def __init__(self, n: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def rope_cos_sin(pos: Tensor, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    """Default (HF "rotate half") rope tables at integer positions ``pos`` [...]:
    cos, sin [..., 1, D] in fp32 (the 1 broadcasts over heads)."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=pos.device,
                                       dtype=torch.float32) / head_dim)
    f = pos.float()[..., None] * inv
    emb = torch.cat([f, f], dim=-1)[..., None, :]
    return emb.cos(), emb.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [..., heads, D] rotated; computed in fp32, returned in x's dtype."""
    xf = x.float()
    a, b = xf.chunk(2, dim=-1)
    return (xf * cos + torch.cat([-b, a], dim=-1) * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, g: Geometry) -> None:
        super().__init__()
        self.g = g
        H, G, D = g.heads, g.kv_heads, g.head_dim
        self.qkv_proj = nn.Linear(g.hidden, (H + 2 * G) * D, bias=False)  # rows q, k, v
        self.o_proj = nn.Linear(H * D, g.hidden, bias=False)
        self.qk_norm = g.family == "qwen3"
        if self.qk_norm:
            self.q_norm = RMSNorm(D, g.eps)
            self.k_norm = RMSNorm(D, g.eps)

    def kv(self, h: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """K, V [S, G, T, D] of ``h`` [S, T, d] (context features c_t, or normed block rows)."""
        g = self.g
        S, T, _ = h.shape
        kv = F.linear(h, self.qkv_proj.weight[g.heads * g.head_dim:])
        k, v = kv.view(S, T, 2, g.kv_heads, g.head_dim).unbind(2)
        if self.qk_norm:
            k = self.k_norm(k)
        return apply_rope(k, cos, sin).transpose(1, 2), v.transpose(1, 2)

    def forward(self, u: Tensor, cos: Tensor, sin: Tensor, ctx_k: Tensor, ctx_v: Tensor,
                mask: Tensor) -> Tensor:
        """u [S, R, d] normed rows; ctx_k/v [S, G, T, D]; mask [S, R, T + R] (True: attend)."""
        g = self.g
        S, R, _ = u.shape
        q = F.linear(u, self.qkv_proj.weight[: g.heads * g.head_dim]).view(S, R, g.heads,
                                                                         g.head_dim)
        if self.qk_norm:
            q = self.q_norm(q)
        q = apply_rope(q, cos, sin).transpose(1, 2)
        k, v = self.kv(u, cos, sin)
        rep = g.heads // g.kv_heads  # GQA: q head h reads kv head h // rep
        K = torch.cat([ctx_k, k], dim=2).repeat_interleave(rep, dim=1)
        V = torch.cat([ctx_v, v], dim=2).repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q, K.to(q.dtype), V.to(q.dtype),
                                           attn_mask=mask[:, None])  # scale 1/sqrt(D)
        return self.o_proj(o.transpose(1, 2).reshape(S, R, g.heads * g.head_dim))


class MLP(nn.Module):
    def __init__(self, g: Geometry) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(g.hidden, 2 * g.intermediate, bias=False)  # gate, up
        self.down_proj = nn.Linear(g.intermediate, g.hidden, bias=False)

    def forward(self, v: Tensor) -> Tensor:
        gate, up = self.gate_up_proj(v).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DraftLayer(nn.Module):
    def __init__(self, g: Geometry) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(g.hidden, g.eps)
        self.self_attn = Attention(g)
        self.post_attention_layernorm = RMSNorm(g.hidden, g.eps)
        self.mlp = MLP(g)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, ctx_k: Tensor, ctx_v: Tensor,
                mask: Tensor) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, ctx_k, ctx_v, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Draft(nn.Module):
    """The draft; ``embed``/``lm_head`` [V, d] are the target's (frozen, not exported)."""

    def __init__(self, g: Geometry, cfg: DraftConfig, embed: Tensor, lm_head: Tensor) -> None:
        super().__init__()
        self.g, self.cfg = g, cfg
        d = g.hidden
        self.fc = nn.Linear(TAPS * d, d, bias=False)
        self.hidden_norm = RMSNorm(d, g.eps)
        self.layers = nn.ModuleList(DraftLayer(g) for _ in range(cfg.layers))
        self.norm = RMSNorm(d, g.eps)
        self.markov_w1 = nn.Embedding(g.vocab, cfg.markov_rank)
        self.markov_w2 = nn.Linear(cfg.markov_rank, g.vocab, bias=False)
        self.register_buffer("embed", embed.detach().float(), persistent=False)
        self.register_buffer("lm_head", lm_head.detach().float(), persistent=False)
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02) -> None:
        """Linear weights N(0, std²), norms 1, Markov W2 = 0 (the head starts as the base)."""
        for name, p in self.named_parameters():
            with torch.no_grad():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name == "markov_w2.weight":
                    p.zero_()
                else:
                    p.normal_(0.0, std)

    def context(self, taps: Tensor) -> Tensor:
        """c_t [S, T, d] from the 5 tap hidden states concatenated, taps [S, T, 5d]."""
        return self.hidden_norm(self.fc(taps))

    def rows(self, c: Tensor, anchor_tok: Tensor, anchors: Tensor) -> Tensor:
        """The blocks' final hidden states, normed: [S, N, B, d].

        c [S, T, d]; anchor_tok, anchors [S, N] (token a and position p of each block)."""
        S, N = anchors.shape
        B, T = self.cfg.block, c.shape[1]
        ids = torch.full((S, N, B), self.cfg.mask_token_id, dtype=torch.long, device=c.device)
        ids[:, :, 0] = anchor_tok
        x = self.embed[ids.view(S, N * B)]
        pos = (anchors[:, :, None] + torch.arange(B, device=c.device)).view(S, N * B)
        cos, sin = rope_cos_sin(pos, self.g.head_dim, self.g.rope_theta)
        ccos, csin = rope_cos_sin(torch.arange(T, device=c.device), self.g.head_dim,
                                  self.g.rope_theta)
        mask = block_mask(anchors, T, B)
        for layer in self.layers:
            ck, cv = layer.self_attn.kv(c, ccos, csin)
            x = layer(x, cos, sin, ck, cv, mask)
        return self.norm(x).view(S, N, B, -1)

    def base_logits(self, h: Tensor) -> Tensor:
        """lm_head of the normed rows h [..., d] -> [..., V] in fp32."""
        return F.linear(h, self.lm_head.to(h.dtype)).float()

    def markov(self, prev: Tensor) -> Tensor:
        """W2 · W1[prev] [..., V] in fp32, prev [...] token ids."""
        return self.markov_w2(self.markov_w1(prev)).float()

    def forward(self, taps: Tensor, tokens: Tensor, anchors: Tensor) -> Tensor:
        """Teacher-forced logits [S, N, B, V]: row k of the block at p predicts p + k + 1 with
        Markov prev_k = tokens[p + k]. taps [S, T, 5d], tokens [S, T'] (T' ≥ p + B), anchors
        [S, N]."""
        B = self.cfg.block
        c = self.context(taps)
        h = self.rows(c, tokens.gather(1, anchors), anchors)
        prev = tokens.gather(1, (anchors[:, :, None] + torch.arange(B, device=tokens.device))
                             .flatten(1)).view_as(h[..., 0])
        return self.base_logits(h) + self.markov(prev)


def block_mask(anchors: Tensor, T: int, B: int) -> Tensor:
    """[S, N·B, T + N·B] bool: row (n, k) attends to context t < anchors[:, n] and to the B rows
    of its own block n (all of them: non-causal inside the block), nothing else."""
    S, N = anchors.shape
    dev = anchors.device
    row_anchor = anchors.repeat_interleave(B, dim=1)                       # [S, R]
    ctx = torch.arange(T, device=dev)[None, None, :] < row_anchor[:, :, None]
    blk = torch.arange(N, device=dev).repeat_interleave(B)                 # [R]
    own = (blk[:, None] == blk[None, :]).expand(S, -1, -1)
    return torch.cat([ctx, own], dim=2)
