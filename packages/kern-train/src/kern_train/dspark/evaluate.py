"""Offline acceptance on held-out sequences (issue 15: τ ≥ 2.3 before wiring).

For each sampled anchor p the draft proposes B tokens as at inference: one block forward, then
the Markov head chained greedily — ``d_k = argmax(base_k + W2 · W1[prev_k])`` with
``prev_0 = a`` and ``prev_k = d_{k−1}`` (the draft's own token). They are compared with the
target's greedy continuation ``g_k`` = token p + k + 1 of the sequence; ``accepted`` is the
length of the longest equal prefix, τ = mean(1 + accepted) (the bonus token counted), and the
per-position acceptance ``P(accepted ≥ k)``, k = 1..B; ``by_source`` gives the same per prompt
source (sharegpt, gsm8k, humaneval) when the sequences record it, since the online benchmark
measures chat and math/code prompts apart.

τ over uniformly sampled anchors is not what a loop achieves on the same text: a loop's next
anchor sits right after its last block, so its rounds crowd where blocks fail (a stretch the
draft predicts well is crossed in few rounds, a hard one takes a round per token); the loop's
τ is tokens / rounds, a harmonic rather than an arithmetic mean. ``loop`` replays the greedy
loop on each held-out text (:func:`loop_rounds`, every position's accepted length from one
teacher-forced pass) and gives that τ, the offline predictor of the online one.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .batches import Batch, labels, make_batch
from .data import Sequences
from .model import Draft
from .target import Target


def chain_greedy(base: Tensor, markov, anchor_tok: Tensor) -> Tensor:
    """Draft tokens [..., B] from base logits [..., B, V], ``markov(prev) -> [..., V]`` and the
    anchors' tokens [...]; prev_0 = the anchor, prev_k = the previous draft token."""
    prev = anchor_tok
    out = []
    for k in range(base.shape[-2]):
        d = (base[..., k, :] + markov(prev)).argmax(-1)
        out.append(d)
        prev = d
    return torch.stack(out, dim=-1)


def accepted_prefix(draft_tok: Tensor, target_tok: Tensor) -> Tensor:
    """[...] length of the longest prefix where draft == target, inputs [..., B]."""
    return (draft_tok == target_tok).long().cumprod(-1).sum(-1)


def summarize(acc: Tensor, block: int) -> dict:
    """τ and per-position acceptance of accepted lengths ``acc`` [n]."""
    n = int(acc.numel())
    per = [float((acc >= k).float().mean()) for k in range(1, block + 1)] if n else []
    return {"tau": float(1 + acc.float().mean()) if n else float("nan"), "anchors": n,
            "acceptance": [round(x, 4) for x in per],
            "conditional": [round(per[0], 4)] + [round(b / a, 4) if a else 0.0
                                                 for a, b in zip(per, per[1:])] if n else []}


def loop_rounds(acc: dict[int, int], first: int) -> list[int]:
    """Tokens emitted by each round of a greedy speculation loop replayed on a fixed text, from
    ``acc`` = {anchor position: accepted drafts}: the first round anchors at ``first``, a
    round accepting a drafts emits a + 1 tokens (the bonus included) and the next one anchors
    a + 1 positions later; the replay stops at the first anchor ``acc`` lacks (its block would
    run past the text)."""
    out, p = [], first
    while p in acc:
        out.append(acc[p] + 1)
        p += acc[p] + 1
    return out


def block_accepted(target: Target, draft: Draft, b: Batch) -> Tensor:
    """[S, N] accepted length of the draft's greedy block at each anchor of ``b`` against the
    sequence's own next tokens (invalid anchors included: the caller masks them)."""
    dev = target.device
    anchor_tok = b.tokens.gather(1, b.anchors)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda"):
        taps, _ = target.taps(b.tokens, draft.cfg.tap_layers)
        c = draft.context(taps.float() if dev.type != "cuda" else taps)
        h = draft.rows(c, anchor_tok, b.anchors)
        d = chain_greedy(draft.base_logits(h), draft.markov, anchor_tok)
    return accepted_prefix(d, labels(b, draft.cfg.block))


@torch.no_grad()
def evaluate(target: Target, draft: Draft, seqs: Sequences, *, anchors: int = 16,
             batch: int = 32, seed: int = 1) -> dict:
    """Offline τ over the held-out sequences of ``seqs`` (``anchors`` per sequence, seeded)."""
    held = np.flatnonzero(seqs.eval)
    src = seqs.sources()
    B = draft.cfg.block
    dev = target.device
    gen = torch.Generator().manual_seed(seed)
    accs, srcs = [], []
    draft.eval()
    for i in range(0, len(held), batch):
        b = make_batch(seqs, held[i:i + batch], anchors, B, gen, dev)
        accs.append(block_accepted(target, draft, b)[b.valid].cpu())
        rows = np.repeat(src[held[i:i + batch]], b.anchors.shape[1])   # [S·N], row-major
        srcs.append(rows[b.valid.flatten().cpu().numpy()])
    # every-anchor batches hold ~length − prompt_len anchors a sequence, not ``anchors``
    loop = replayed_loops(target, draft, seqs, held, batch=max(1, batch // 4))
    draft.train()
    acc = torch.cat(accs) if accs else torch.zeros(0, dtype=torch.long)
    per = np.concatenate(srcs) if srcs else np.zeros(0, dtype=str)
    by = {s: summarize(acc[torch.as_tensor(per == s)], B) for s in sorted(set(per)) if s}
    return {**summarize(acc, B), "sequences": int(len(held)), "seed": seed, "by_source": by,
            "loop": loop_summary(loop, src[held])}


def replayed_loops(target: Target, draft: Draft, seqs: Sequences, rows: np.ndarray, *,
                   batch: int) -> list[list[int]]:
    """:func:`loop_rounds` of each sequence of ``rows`` (from its prompt's end), every valid
    anchor teacher-forced (make_batch with n = None)."""
    out = []
    for i in range(0, len(rows), batch):
        part = rows[i:i + batch]
        b = make_batch(seqs, part, None, draft.cfg.block, None, target.device)
        acc = block_accepted(target, draft, b).cpu()
        anchors, valid = b.anchors.cpu(), b.valid.cpu()
        for r, row in enumerate(part):
            ok = valid[r]
            at = dict(zip(anchors[r][ok].tolist(), acc[r][ok].tolist()))
            out.append(loop_rounds(at, int(seqs.prompt_len[row])))
    return out


def loop_summary(rounds: list[list[int]], sources: np.ndarray) -> dict:
    """τ = tokens / rounds pooled over sequences (as the online bench pools its prompts),
    overall and per source."""
    def one(rs: list[list[int]]) -> dict:
        n = sum(map(len, rs))
        return {"tau": sum(map(sum, rs)) / n if n else float("nan"), "rounds": n}
    by = {s: one([r for r, x in zip(rounds, sources) if x == s])
          for s in sorted(set(sources.tolist())) if s}
    return {**one(rounds), "by_source": by}


@torch.no_grad()
def accepted_at(target: Target, draft: Draft, tokens: list[int], anchors: list[int]
                ) -> list[int | None]:
    """The draft's accepted length at each anchor position of one sequence ``tokens`` (the
    target's greedy text), teacher-forced as :func:`evaluate` does; None where the block's B
    labels run past the end.  Given the anchors an online loop used (one per round), this is
    what the draft *should* have accepted there: compared with the loop's own counts it tells
    a weak draft from a serving path that feeds it something else."""
    B = draft.cfg.block
    dev = target.device
    ok = [p for p in anchors if 0 <= p and p + B < len(tokens)]
    out: dict[int, int] = {}
    if ok:
        tok = torch.tensor([tokens], dtype=torch.long, device=dev)
        a = torch.tensor([ok], dtype=torch.long, device=dev)
        draft.eval()
        acc = block_accepted(target, draft, Batch(tok, a, torch.ones_like(a, dtype=torch.bool)))
        out = dict(zip(ok, acc[0].tolist()))
    return [out.get(p) for p in anchors]
