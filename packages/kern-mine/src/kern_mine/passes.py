"""Cutting the kept launches into requests and forward passes (DESIGN §4, mining step 1).

Input: the kept launches (executed, not benchmark repetitions) as parallel lists of entry
times and identity ids, in call order.  Positions below are indices into those lists.

Contract:

* **Requests** are separated by time gaps larger than ``gap_ns`` (default 5 ms) between
  consecutive kept launches.
* **Forwards** are cut at the bursts of a *core* kernel: the most frequent identity among the
  launches not yet assigned.  Its occurrences are split into bursts at request boundaries and
  at occurrence-to-occurrence time gaps that are a *natural break*: sorting the gaps, the first
  jump by a factor ``burst_jump`` above the median (the median gap is an intra-forward gap
  because a core kernel bursts many times per forward).  The launches between two bursts are
  split at the largest time gap between them (the host syncs between forwards); the majority
  head/tail lengths found this way bound the forwards at request edges and around long
  stretches of foreign launches, so a few launches of boundary jitter are tolerated and later
  fixed by majority alignment (``sites``).
* Bursts whose core count differs from the family's most common count are **irregular**
  forwards (a first forward interleaved with autotuning, a truncated capture); they are
  reported and not mined.
* Launches left over (a different compiled graph whose kernels never share the first core,
  cache resets between requests...) are cut again with their own core kernel: each round is a
  **family** with its own core.  Rounds stop when no identity yields two regular forwards.
  What is still left is reported as unassigned.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import msgspec

__all__ = ["Forward", "Family", "Passes", "cut_passes"]


class Forward(msgspec.Struct):
    """One forward pass: positions ``[start, end)`` of the kept launches."""

    index: int
    request: int
    family: int
    start: int
    end: int
    core_count: int
    regular: bool


class Family(msgspec.Struct):
    """One round of cutting: a core kernel and the forwards cut at its bursts."""

    index: int
    core: int
    """Identity id of the core kernel."""
    core_per_forward: int
    """The most common number of core launches per forward (regular forwards have it)."""
    burst_gap_ns: int | None
    """Occurrence gaps above this split bursts (None: only request boundaries split)."""
    head: int
    tail: int
    """Majority launches before the first / after the last core launch of a forward."""
    forwards: list[int]


class Passes(msgspec.Struct):
    requests: list[tuple[int, int]]
    """``[start, end)`` positions of each request."""
    forwards: list[Forward]
    """Every forward, in call order; ``index`` is the position in this list."""
    families: list[Family]
    unassigned: int
    """Kept launches in no forward."""


def _natural_break(gaps: list[int], jump: float) -> int | None:
    """The largest intra-burst gap: scanning the sorted gaps upward from the median, the value
    just below the first jump by ``jump``x.  None when there is no such jump."""
    if len(gaps) < 2:
        return None
    s = sorted(gaps)
    for k in range(len(s) // 2, len(s) - 1):
        if s[k + 1] > jump * max(s[k], 1):
            return s[k]
    return None


def _mode(values: list[int]) -> int:
    """Most common value; ties go to the larger value."""
    c = Counter(values)
    return max(c, key=lambda v: (c[v], v))


def _largest_gap(t: Sequence[int], lo: int, hi: int) -> int:
    """The position j in [lo, hi] maximising t[j] - t[j-1] (first on ties)."""
    best, at = -1, lo
    for j in range(lo, hi + 1):
        g = t[j] - t[j - 1]
        if g > best:
            best, at = g, j
    return at


def cut_passes(
    t: Sequence[int],
    ids: Sequence[int],
    gap_ns: int = 5_000_000,
    burst_jump: float = 4.0,
    max_families: int = 16,
) -> Passes:
    """Requests, families and forwards of the kept launches (see the module docstring)."""
    n = len(t)
    req = [0] * n
    requests: list[tuple[int, int]] = []
    start = 0
    for i in range(1, n):
        req[i] = req[i - 1]
        if t[i] - t[i - 1] > gap_ns:
            req[i] += 1
            requests.append((start, i))
            start = i
    if n:
        requests.append((start, n))
    req_start = [s for s, _ in requests]
    req_end = [e for _, e in requests]

    owner = [-1] * n
    families: list[Family] = []
    forwards: list[Forward] = []
    while len(families) < max_families:
        counts = Counter(ids[i] for i in range(n) if owner[i] < 0)
        made = False
        for core, c in counts.most_common(4):
            if c < 2:
                break
            cut = _cut_family(core, t, ids, req, req_start, req_end, owner, burst_jump)
            if cut is None:
                continue
            fam, spans = cut
            fam.index = len(families)
            for s, e, cnt, regular in spans:
                k = len(forwards)
                forwards.append(Forward(k, req[s], fam.index, s, e, cnt, regular))
                fam.forwards.append(k)
                for j in range(s, e):
                    owner[j] = k
            families.append(fam)
            made = True
            break
        if not made:
            break
    # Re-number forwards in call order (families were cut in rounds).
    order = sorted(range(len(forwards)), key=lambda k: forwards[k].start)
    renum = {old: new for new, old in enumerate(order)}
    forwards = [forwards[k] for k in order]
    for k, f in enumerate(forwards):
        f.index = k
    for fam in families:
        fam.forwards = sorted(renum[k] for k in fam.forwards)
    return Passes(requests, forwards, families, sum(1 for o in owner if o < 0))


def _cut_family(core, t, ids, req, req_start, req_end, owner, burst_jump):
    """Bursts of ``core`` among unowned launches -> (Family, [(start, end, count, regular)]),
    or None when fewer than two regular forwards come out."""
    n = len(t)
    owned_before = [0] * (n + 1)  # prefix count of owned positions
    for i in range(n):
        owned_before[i + 1] = owned_before[i] + (owner[i] >= 0)

    def clear(a: int, b: int) -> bool:  # no owned launch in (a, b)
        return owned_before[b] - owned_before[a + 1] == 0

    occ = [i for i in range(n) if owner[i] < 0 and ids[i] == core]
    linked = [req[a] == req[b] and clear(a, b) for a, b in zip(occ, occ[1:])]
    gaps = [t[b] - t[a] for (a, b), ok in zip(zip(occ, occ[1:]), linked) if ok]
    thr = _natural_break(gaps, burst_jump)
    bursts: list[list[int]] = [[occ[0]]]
    for (a, b), ok in zip(zip(occ, occ[1:]), linked):
        if ok and (thr is None or t[b] - t[a] <= thr):
            bursts[-1].append(b)
        else:
            bursts.append([b])
    modal = _mode([len(b) for b in bursts])
    if sum(1 for b in bursts if len(b) == modal) < 2:
        return None

    # Interior windows between bursts of one request with nothing owned in between: split at
    # the largest time gap; their majority head/tail lengths serve every other boundary.
    interior = [req[b1[-1]] == req[b2[0]] and clear(b1[-1], b2[0]) for b1, b2 in zip(bursts, bursts[1:])]
    splits: list[int | None] = []
    heads, tails = [], []
    for (b1, b2), inner in zip(zip(bursts, bursts[1:]), interior):
        if not inner:
            splits.append(None)
            continue
        j = _largest_gap(t, b1[-1] + 1, b2[0])
        splits.append(j)
        tails.append(j - b1[-1] - 1)
        heads.append(b2[0] - j)
    head = _mode(heads) if heads else None
    tail = _mode(tails) if tails else None

    def edge_limit_before(i: int) -> int:  # first position a forward starting before i may take
        lo = req_start[req[i]]
        j = i - 1
        while j >= lo and owner[j] < 0:
            j -= 1
        return j + 1

    def edge_limit_after(i: int) -> int:  # one past the last position a forward ending after i may take
        hi = req_end[req[i]]
        j = i + 1
        while j < hi and owner[j] < 0:
            j += 1
        return j

    def edge_start(b0: int, limit: int) -> int:
        if head is not None:
            return max(limit, b0 - head)
        # No interior evidence: start after the last gap above the burst threshold, if any.
        s = limit
        for j in range(limit + 1, b0 + 1):
            if thr is not None and t[j] - t[j - 1] > thr:
                s = j
        return s

    def edge_end(b1: int, limit: int) -> int:
        if tail is not None:
            return min(limit, b1 + 1 + tail)
        for j in range(b1 + 1, limit):
            if thr is not None and t[j] - t[j - 1] > thr:
                return j
        return limit

    slack = max(4, (head or 0) + (tail or 0))
    starts = [0] * len(bursts)
    ends = [0] * len(bursts)
    starts[0] = edge_start(bursts[0][0], edge_limit_before(bursts[0][0]))
    for k, (b1, b2) in enumerate(zip(bursts, bursts[1:])):
        j = splits[k]
        window = b2[0] - b1[-1] - 1
        if j is not None and window <= (head or 0) + (tail or 0) + slack:
            ends[k] = starts[k + 1] = j
        else:
            ends[k] = edge_end(b1[-1], edge_limit_after(b1[-1]) if j is None else b2[0])
            starts[k + 1] = edge_start(b2[0], edge_limit_before(b2[0]) if j is None else ends[k])
    ends[-1] = edge_end(bursts[-1][-1], edge_limit_after(bursts[-1][-1]))

    fam = Family(-1, core, modal, thr, head or 0, tail or 0, [])
    spans = [(s, e, len(b), len(b) == modal) for s, e, b in zip(starts, ends, bursts)]
    return fam, spans
