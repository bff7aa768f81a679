"""The prompt-lookup proposer and the accept rule, against brute-force definitions."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kern_run.spec import NgramProposer, accept_prefix, emitted


def reference(seq, k, n_min, n_max):
    """The definition, by rescanning: the most recent earlier occurrence of the last n
    tokens, n from n_max down; the continuation repeats with period len(seq) − end."""
    L = len(seq)
    for n in range(n_max, n_min - 1, -1):
        if L < n:
            continue
        suffix = seq[L - n:]
        for i in range(L - n - 1, -1, -1):
            if seq[i:i + n] == suffix:
                e = i + n
                return [seq[e + m % (L - e)] for m in range(k)]
    return []


def test_most_recent_match_and_longest_n_first():
    p = NgramProposer(1, 3)
    p.extend([5, 1, 2, 9, 9, 1, 2, 7, 7, 3, 1, 2])
    # "1 2" occurred at 1…2 (→ 9) and at 5…6 (→ 7): the most recent wins
    assert p.match() == 2 and p.propose(3) == [7, 7, 3]
    p.extend([7])
    # "2 7" recurs → "7 3 1"; the 3-gram "1 2 7" recurs too and is preferred: → "7 3 1"
    assert p.match() == 3 and p.propose(3) == [7, 3, 1]
    p.extend([4])                     # 4 never seen: nothing of any n
    assert p.match() == 0 and p.propose(5) == []


def test_n_min_excludes_short_matches():
    p = NgramProposer(2, 2)
    p.extend([1, 2, 3, 1])            # only the unigram "1" recurs
    assert p.propose(4) == []
    p.extend([2])
    assert p.propose(4) == [3, 1, 2, 3]   # "1 2" → 3 1 2, then periodically


def test_overlapping_match_continues_the_period():
    p = NgramProposer(1, 2)
    p.extend([8, 4, 4, 4])
    assert p.propose(5) == [4, 4, 4, 4, 4]
    p = NgramProposer(2, 2)
    p.extend([0, 1, 2, 1, 2])         # "1 2" at 1…2 ends at e = 3, period 2: 1 2 1 2 …
    assert p.propose(5) == [1, 2, 1, 2, 1]


def test_k_bounds_and_empty():
    p = NgramProposer(1, 1)
    assert p.propose(3) == []
    p.extend([3])
    assert p.propose(3) == []         # a single token has no earlier occurrence
    p.extend([3])
    assert p.propose(0) == [] and p.propose(2) == [3, 3]
    with pytest.raises(ValueError, match="n_min"):
        NgramProposer(3, 2)
    with pytest.raises(ValueError, match="n_min"):
        NgramProposer(0, 2)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=60), st.integers(1, 4), st.integers(0, 3),
       st.integers(1, 9), st.lists(st.integers(1, 7), max_size=8))
def test_incremental_index_equals_the_rescan(seq, n_min, extra, k, cuts):
    """Fed in arbitrary pieces, the index answers as a full rescan after every piece."""
    n_max = n_min + extra
    p = NgramProposer(n_min, n_max)
    done = 0
    pieces = []
    for c in cuts + [len(seq)]:
        pieces.append(seq[done:done + c])
        done += c
    for piece in pieces:
        p.extend(piece)
        now = seq[:len(p)]
        assert p.seq == now
        assert p.propose(k) == reference(now, k, n_min, n_max)


def test_accept_prefix():
    assert accept_prefix([], [9]) == 0
    assert accept_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert accept_prefix([1, 2, 3], [1, 5, 3, 4]) == 1
    assert accept_prefix([1, 2, 3], [0, 2, 3, 4]) == 0
    # a later match after a mismatch does not count: row 2 saw the rejected draft 2
    assert emitted([1, 2, 3], [1, 5, 3, 4]) == [1, 5]
    assert emitted([1, 2, 3], [1, 2, 3, 4]) == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="predictions"):
        accept_prefix([1, 2], [1, 2])
