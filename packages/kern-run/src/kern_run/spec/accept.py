"""The accept rule of a greedy verify round (lossless by construction).

``verify`` runs the target over ``[anchor, d0 … d(m−1)]`` and returns, for every row i, the
greedy prediction of the token after it. Row i's prediction is what plain greedy decoding
would produce at that position provided the drafts before it were right; so draft i may be
kept only while every draft up to and including it equals the prediction of the row before
it. The first mismatching row's prediction is the correction, and when all m drafts match the
last row's prediction is a bonus token: a round always yields j + 1 tokens of plain greedy
output, j being the accepted prefix."""

from __future__ import annotations

from collections.abc import Sequence


def accept_prefix(drafts: Sequence[int], predictions: Sequence[int]) -> int:
    """j: the longest prefix with ``drafts[i] == predictions[i]`` for all i < j
    (0 ≤ j ≤ len(drafts)). ``predictions`` holds one row more than ``drafts``."""
    if len(predictions) != len(drafts) + 1:
        raise ValueError(f"a round over {len(drafts)} drafts has {len(drafts) + 1} "
                         f"predictions, not {len(predictions)}")
    j = 0
    for d, p in zip(drafts, predictions):
        if d != p:
            break
        j += 1
    return j


def emitted(drafts: Sequence[int], predictions: Sequence[int]) -> list[int]:
    """The round's output: ``predictions[0 … j]`` (j accepted drafts and the correction or
    bonus token); the next anchor is its last token."""
    return list(predictions[:accept_prefix(drafts, predictions) + 1])
