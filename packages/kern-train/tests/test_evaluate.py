"""Offline τ on a hand-built draft whose proposals are known: every layer's output projections
are zero (rows keep their embeddings), and the Markov head outweighs the base so that the draft
proposes d_k = prev_k + 1 — i.e. a+1, a+2, … chained on its own tokens."""

from __future__ import annotations

import numpy as np
import torch

from kern_train.dspark.config import DraftConfig, Geometry, tap_layers
from kern_train.dspark.data import Sequences
from kern_train.dspark.evaluate import (accepted_at, accepted_prefix, chain_greedy, evaluate,
                                        loop_rounds)
from kern_train.dspark.model import Draft

V = 32


class FlatTarget:
    """Only what evaluate() reads: the device and tap features (irrelevant here)."""
    device = torch.device("cpu")

    def taps(self, tokens, tap_layers):
        S, T = tokens.shape
        return torch.zeros(S, T, 5 * 16), torch.zeros(S, T, 16)


def counting_draft() -> Draft:
    g = Geometry("llama", 8, 16, 2, 1, 8, 8, V, 1e-6, 10000.0)
    cfg = DraftConfig(target="t", family="llama", target_layers=8, layers=1,
                      tap_layers=tap_layers(8), markov_rank=V, mask_token_id=0, seed=0)
    d = Draft(g, cfg, torch.randn(V, 16), torch.randn(V, 16))
    with torch.no_grad():
        d.layers[0].self_attn.o_proj.weight.zero_()
        d.layers[0].mlp.down_proj.weight.zero_()
        d.markov_w1.weight.copy_(torch.eye(V))
        w2 = torch.zeros(V, V)
        w2[(torch.arange(V) + 1) % V, torch.arange(V)] = 1000.0   # prev -> prev + 1
        d.markov_w2.weight.copy_(w2)
    return d


def seqs(rows: list[list[int]], source=None) -> Sequences:
    T = max(map(len, rows))
    tok = np.zeros((len(rows), T), dtype=np.int32)
    for i, r in enumerate(rows):
        tok[i, :len(r)] = r
    n = len(rows)
    return Sequences(tok, np.array([len(r) for r in rows], np.int32), np.ones(n, np.int32),
                     np.ones(n, bool), {}, None if source is None else np.array(source))


def test_tau_of_a_hand_built_case():
    # prompt = token 0 (prompt_len 1); anchors p = 1 .. length − 8
    rows = [list(range(16)),            # counts up: every anchor accepts all 7 -> τ 8 (8 anchors)
            [5] * 16,                   # constant: d_0 = a + 1 never matches -> τ 1 (8 anchors)
            [0, 1, 2, 3, 4, 0, 0, 0, 0]]  # one anchor p = 1 (a = 1): 2, 3, 4 match, then 0 ≠ 5
    res = evaluate(FlatTarget(), counting_draft(), seqs(rows), anchors=64)
    assert res["anchors"] == 17
    assert abs(res["tau"] - (8 * 8 + 8 * 1 + 4) / 17) < 1e-6
    want = [9 / 17, 9 / 17, 9 / 17] + [8 / 17] * 4
    assert np.allclose(res["acceptance"], want, atol=1e-4)
    assert np.allclose(res["conditional"][:4], [9 / 17, 1, 1, 8 / 9], atol=1e-4)
    assert res["by_source"] == {}                      # sequences without sources


def test_tau_per_source():
    rows = [list(range(16)), [5] * 16, [0, 1, 2, 3, 4, 0, 0, 0, 0]]
    res = evaluate(FlatTarget(), counting_draft(), seqs(rows, ["chat", "math", "math"]),
                   anchors=64)
    by = res["by_source"]
    assert set(by) == {"chat", "math"}
    assert by["chat"]["anchors"] == 8 and abs(by["chat"]["tau"] - 8.0) < 1e-6
    assert by["math"]["anchors"] == 9 and abs(by["math"]["tau"] - (8 * 1 + 4) / 9) < 1e-6
    assert by["chat"]["anchors"] + by["math"]["anchors"] == res["anchors"]
    # the replayed loop: chat one round of 8; math 8 rounds of 1 (constant) + one of 4
    loop = res["loop"]["by_source"]
    assert loop["chat"] == {"tau": 8.0, "rounds": 1}
    assert loop["math"]["rounds"] == 9 and abs(loop["math"]["tau"] - 12 / 9) < 1e-9


def test_chain_uses_the_drafts_own_previous_token():
    base = torch.zeros(1, 3, V)
    calls = []

    def markov(prev):
        calls.append(prev.clone())
        out = torch.zeros(1, V)
        out[0, (prev + 2) % V] = 1.0
        return out
    d = chain_greedy(base, markov, torch.tensor([4]))
    assert d.tolist() == [[6, 8, 10]]
    assert [int(c) for c in calls] == [4, 6, 8]


def test_accepted_prefix():
    d = torch.tensor([[1, 2, 3, 4], [1, 9, 3, 4], [0, 2, 3, 4]])
    g = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]])
    assert accepted_prefix(d, g).tolist() == [4, 1, 0]


def test_accepted_at_given_anchors():
    # counting draft proposes a+1, a+2, …: on 0..15 every anchor accepts 7; on a sequence
    # that stops counting after 4, anchor 1 accepts 3 (2, 3, 4 match, then 0 != 5)
    up = list(range(16))
    assert accepted_at(FlatTarget(), counting_draft(), up, [1, 5, 8]) == [7, 7, 7]
    assert accepted_at(FlatTarget(), counting_draft(), up, [9, 20]) == [None, None]  # p+7 > 15
    bent = [0, 1, 2, 3, 4, 0, 0, 0, 0]
    assert accepted_at(FlatTarget(), counting_draft(), bent, [1]) == [3]


def test_loop_rounds_replay_the_greedy_loop():
    # anchors 0..9; a block at 0 accepts 2 (3 tokens), at 3 nothing, at 4 accepts 4, at 9
    # nothing; 10 is absent (its block would run past the text)
    acc = {p: 0 for p in range(10)}
    acc.update({0: 2, 4: 4})
    assert loop_rounds(acc, 0) == [3, 1, 5, 1]       # anchors 0, 3, 4, 9
    assert loop_rounds(acc, 10) == []


def test_loop_tau_is_tokens_per_round_not_the_anchor_mean():
    # an easy stretch (counting up) then a hard one (constant): uniform anchors average
    # 8 and 1 equally, the loop crosses the easy stretch in few rounds
    rows = [list(range(24)) + [5] * 24]
    res = evaluate(FlatTarget(), counting_draft(), seqs(rows), anchors=256)
    loop = res["loop"]
    # anchors p = 1..40; tokens count up to index 23, so a block at p accepts
    # max(0, min(7, 23 − p)): Σ = 16·7 + (6+5+4+3+2+1) = 133 over 40 anchors -> τ 4.325;
    # the loop anchors at 1, 9, 17 (8, 8, 7 tokens), then once per token at 24..40 (17 rounds)
    assert res["anchors"] == 40 and abs(res["tau"] - (1 + 133 / 40)) < 1e-6
    assert loop["rounds"] == 20 and abs(loop["tau"] - 40 / 20) < 1e-9
    assert loop["by_source"] == {}
