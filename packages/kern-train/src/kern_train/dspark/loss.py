"""The DSpark objective (docs/dspark.md, "Loss"): per block, prediction positions k = 1..B
(row k − 1) weighted by exp(−(k − 1)/4), normalised over the block, of
``0.1·CE(logits, target token) + 0.9·TV(softmax(logits), softmax(target logits))``,
TV = ½ Σ |p − q|; averaged over the valid blocks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

CE_WEIGHT = 0.1
TV_WEIGHT = 0.9
DECAY = 4.0


def position_weights(block: int, device: torch.device | None = None) -> Tensor:
    """[B] weights exp(−(k − 1)/4) for prediction positions k = 1..B, summing to 1."""
    w = torch.tensor([math.exp(-k / DECAY) for k in range(block)], device=device)
    return w / w.sum()


def dspark_loss(logits: Tensor, target_logits: Tensor, labels: Tensor,
                valid: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """logits, target_logits [S, N, B, V]; labels [S, N, B] (the token each row predicts);
    valid [S, N] bool (blocks that exist). Returns (scalar loss, {"ce", "tv"}: detached block means, left on the device so that a step
    does not wait for them)."""
    B = logits.shape[2]
    logp = F.log_softmax(logits.float(), dim=-1)
    ce = -logp.gather(-1, labels[..., None]).squeeze(-1)                   # [S, N, B]
    q = F.softmax(target_logits.float(), dim=-1)
    tv = 0.5 * (logp.exp() - q).abs().sum(-1)                             # [S, N, B]
    w = position_weights(B, logits.device)
    per_block = ((CE_WEIGHT * ce + TV_WEIGHT * tv) * w).sum(-1)           # [S, N]
    m = valid.float()
    n = m.sum().clamp_min(1.0)
    loss = (per_block * m).sum() / n
    with torch.no_grad():
        stats = {"ce": ((ce * w).sum(-1) * m).sum() / n, "tv": ((tv * w).sum(-1) * m).sum() / n}
    return loss, stats
