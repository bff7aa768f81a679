"""Helpers of kern-train's tests: a tiny geometry (8 target layers, d = 32, GQA 4/2) and
drafts on it, on the CPU in float32."""

from __future__ import annotations

import torch

from kern_train.dspark.config import DraftConfig, Geometry, tap_layers
from kern_train.dspark.model import Draft


def geometry(family: str = "llama", vocab: int = 40) -> Geometry:
    return Geometry(family=family, layers=8, hidden=32, heads=4, kv_heads=2, head_dim=8,
                    intermediate=48, vocab=vocab, eps=1e-6, rope_theta=10000.0)


def draft(family: str = "llama", layers: int = 2, seed: int = 0, vocab: int = 40) -> Draft:
    g = geometry(family, vocab)
    cfg = DraftConfig(target="test", family=family, target_layers=8, layers=layers,
                      tap_layers=tap_layers(8), markov_rank=6, mask_token_id=3, seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    emb = torch.randn(vocab, g.hidden, generator=gen)
    head = torch.randn(vocab, g.hidden, generator=gen)
    torch.manual_seed(seed)
    d = Draft(g, cfg, emb, head)
    with torch.no_grad():  # non-trivial Markov head and norms
        d.markov_w2.weight.normal_(0, 0.5)
        for n, p in d.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return d

