"""The DSpark loss against the contract's formula computed element by element."""

from __future__ import annotations

import math

import torch

from kern_train.dspark.loss import dspark_loss, position_weights


def test_position_weights():
    w = position_weights(7)
    raw = [math.exp(-(k - 1) / 4) for k in range(1, 8)]
    torch.testing.assert_close(w, torch.tensor([x / sum(raw) for x in raw]))


def test_loss_is_the_formula():
    gen = torch.Generator().manual_seed(0)
    S, N, B, V = 2, 3, 7, 11
    logits = torch.randn(S, N, B, V, generator=gen)
    tlog = torch.randn(S, N, B, V, generator=gen)
    labels = torch.randint(0, V, (S, N, B), generator=gen)
    valid = torch.tensor([[True, False, True], [True, True, False]])
    loss, stats = dspark_loss(logits, tlog, labels, valid)
    w = [math.exp(-k / 4) for k in range(B)]
    total, blocks = 0.0, 0
    for s in range(S):
        for n in range(N):
            if not valid[s, n]:
                continue
            blocks += 1
            acc = 0.0
            for k in range(B):
                p = torch.softmax(logits[s, n, k].double(), -1)
                q = torch.softmax(tlog[s, n, k].double(), -1)
                ce = -math.log(p[labels[s, n, k]])
                tv = 0.5 * float((p - q).abs().sum())
                acc += w[k] * (0.1 * ce + 0.9 * tv)
            total += acc / sum(w)
    assert math.isclose(float(loss), total / blocks, rel_tol=1e-5)
    assert set(stats) == {"ce", "tv"}


def test_tv_vanishes_on_equal_distributions_and_invalid_blocks_do_not_count():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(1, 2, 7, 5, generator=gen)
    labels = logits.argmax(-1)
    _, st = dspark_loss(logits, logits.clone(), labels, torch.tensor([[True, True]]))
    assert float(st["tv"]) < 1e-6
    junk = logits.clone()
    junk[0, 1] = 100 * torch.randn(7, 5, generator=gen)
    a, _ = dspark_loss(logits, logits, labels, torch.tensor([[True, False]]))
    b, _ = dspark_loss(junk, logits, labels, torch.tensor([[True, False]]))
    assert float(a) == float(b)
