"""Batches of sequences and their blocks: anchor sampling, and the gathers that turn a
target forward into the loss's inputs. Shared by training and evaluation.

A batch is S sequences cropped to the longest one (right padding). Anchors [S, N]: N distinct
positions per sequence drawn uniformly from prompt_len ≤ p ≤ length − 1 − B (seeded); a
sequence with fewer valid positions gets invalid slots (``valid`` False, anchor 0: every gather
stays in range, the loss and τ ignore them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .data import Sequences


@dataclass
class Batch:
    tokens: Tensor    # [S, T] long, on the device
    anchors: Tensor   # [S, N] long
    valid: Tensor     # [S, N] bool


def sample_anchors(length: np.ndarray, prompt_len: np.ndarray, T: int, n: int, block: int,
                   gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """(anchors, valid) [S, n] on the CPU, drawn with ``gen``."""
    S = len(length)
    pos = torch.arange(T)[None, :]
    lo = torch.as_tensor(prompt_len, dtype=torch.long)[:, None]
    hi = torch.as_tensor(length, dtype=torch.long)[:, None] - 1 - block
    ok = (pos >= lo) & (pos <= hi)
    score = torch.rand(S, T, generator=gen).masked_fill(~ok, -1.0)
    k = min(n, T)
    top, idx = score.topk(k, dim=1)
    valid = top >= 0
    anchors = idx.masked_fill(~valid, 0)
    if k < n:
        anchors = torch.cat([anchors, torch.zeros(S, n - k, dtype=torch.long)], 1)
        valid = torch.cat([valid, torch.zeros(S, n - k, dtype=torch.bool)], 1)
    return anchors, valid


def every_anchor(length: np.ndarray, prompt_len: np.ndarray,
                 block: int) -> tuple[Tensor, Tensor]:
    """(anchors, valid) [S, N]: every valid position prompt_len ≤ p ≤ length − 1 − B of each
    sequence in order (N = the most any sequence has; the rest invalid, anchor 0)."""
    lo = torch.as_tensor(prompt_len, dtype=torch.long)[:, None]
    n = torch.as_tensor(length, dtype=torch.long)[:, None] - block - lo     # valid count
    N = max(int(n.max()), 1)
    k = torch.arange(N)[None, :]
    valid = k < n
    return (lo + k).masked_fill(~valid, 0), valid


def make_batch(seqs: Sequences, rows: np.ndarray, n: int | None, block: int,
               gen: torch.Generator | None, device: torch.device | str) -> Batch:
    """The sequences ``rows`` of ``seqs`` with ``n`` sampled anchors each (``n`` None: every
    valid position, :func:`every_anchor`)."""
    length, plen = seqs.length[rows], seqs.prompt_len[rows]
    T = max(int(length.max()), block + 1)
    tok = torch.as_tensor(seqs.tokens[rows, :T].astype(np.int64))
    if tok.shape[1] < T:
        tok = torch.nn.functional.pad(tok, (0, T - tok.shape[1]))
    anchors, valid = (every_anchor(length, plen, block) if n is None
                      else sample_anchors(length, plen, T, n, block, gen))
    return Batch(tok.to(device), anchors.to(device), valid.to(device))


def block_offsets(anchors: Tensor, block: int, shift: int) -> Tensor:
    """[S, N·B] positions anchors + k + shift, k = 0..B−1 (shift 0: the rows' positions;
    1: the positions they predict)."""
    k = torch.arange(block, device=anchors.device) + shift
    return (anchors[:, :, None] + k).flatten(1)


def labels(b: Batch, block: int) -> Tensor:
    """[S, N, B]: the token at p + k + 1, the one row k predicts."""
    S, N = b.anchors.shape
    return b.tokens.gather(1, block_offsets(b.anchors, block, 1)).view(S, N, block)


def rows_of(x: Tensor, anchors: Tensor, block: int) -> Tensor:
    """x [S, T, F] gathered at the rows' positions p + k: [S, N, B, F]."""
    S, N = anchors.shape
    idx = block_offsets(anchors, block, 0)
    return x.gather(1, idx[:, :, None].expand(-1, -1, x.shape[-1])).view(S, N, block, -1)
