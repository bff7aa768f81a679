"""Cutting the kept launches into requests and forward passes (DESIGN §4, mining step 1).

Input: the kept launches (executed, not benchmark repetitions) as parallel lists of entry
times and identity ids, in call order.  Positions below are indices into those lists.

Time separates requests, and nothing else: inside a request, forwards follow each other with
host gaps of a few hundred microseconds, while host stalls *inside* a forward (a host sync, a
guard check, Python) are as long or longer and sit at the same place in every forward, so no
time statistic finds forward boundaries.  Forwards are cut by the kernel sequence itself.

Contract:

* **Requests** are separated by time gaps larger than ``gap_ns`` (default 5 ms) between
  consecutive kept launches.
* A **stretch** is a maximal run of launches of one request that no earlier family owns.
* The **anchor** of a family is a kernel identity that runs once per forward, in every
  forward.  For each identity not yet owned: its *period* is the median distance between
  consecutive occurrences inside a stretch, and its *cover* the share of the stretches'
  launches in segments between consecutive occurrences whose length is within a factor 2 of
  the period (plus one period per stretch, for the part before the first occurrence).  A
  kernel missing from some forwards (one compiled graph only) spans two forwards there and
  one that runs several times in some forwards splits them: both lose cover.  Among the
  identities with at least 90 % of the best cover, those whose period is at least half the
  longest (once per forward, not once per layer) qualify; the one with the most cover wins,
  ties going to the identity seen first.
* The **end** of a forward is ``tail`` launches after an anchor occurrence, ``tail`` being the
  most common number of launches that follow the last anchor occurrence up to the end of a
  request (a request ends with a complete forward; ties: the smaller).
* The **start** kernel (recognised by a class of identities, kern-mine: by kernel name, so that
  the static and dynamic variants of one compiled graph share it): between consecutive ends
  of one stretch lies a forward, possibly
  preceded by launches that are not part of it (cache resets or host-side setup between
  requests or steps).  Among the identities present in at least 90 % of these interior
  segments, the one whose first occurrence lies earliest (median offset from the segment's
  beginning) starts a forward; a forward runs from the first occurrence of the start kernel
  after the previous end to its own end.  The launches before it belong to no forward.  Without
  interior segments (no stretch holds two forwards) there is no start kernel and a forward
  begins right after the previous end (or at the stretch's start).
* A segment inside a stretch (not its first) that lacks the start kernel is a forward whose
  first kernel differs (cuBLAS picks GEMM kernels by problem size): it begins at its first
  launch whose identity is not a *setup* identity (one seen between an end and the next
  start kernel in the other segments).
* **Irregular** (truncated) forwards: the first segment of a stretch that lacks the start
  kernel (the capture or the trim began inside a forward), and launches after the last end
  that contain the start kernel (the capture ended inside one).  They are reported, not mined.
* A family needs two regular forwards with the same kernel sequence (a repeated pass) and a
  median forward of at least two launches.
* Launches left over are cut again in further rounds (a **family** each: e.g. a compiled graph
  that shares no once-per-forward kernel with the first), as long as an anchor yields two or
  more regular forwards at least a quarter as long (median) as the first family's; shorter
  repeating stretches (cache resets, setup bursts between forwards) stay unassigned.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
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
    regular: bool


class Family(msgspec.Struct):
    """One round of cutting: an anchor kernel and the forwards cut at its occurrences."""

    index: int
    anchor: int
    """Identity id of the anchor (once per forward)."""
    tail: int
    """Launches from an anchor occurrence to the last launch of its forward."""
    start: int | None
    """Identity id of the start kernel (None: forwards begin right after the previous one)."""
    between: int
    """Launches inside this family's stretches that lie between forwards (in none)."""
    forwards: list[int]


class Passes(msgspec.Struct):
    requests: list[tuple[int, int]]
    """``[start, end)`` positions of each request."""
    forwards: list[Forward]
    """Every forward, in call order; ``index`` is the position in this list."""
    families: list[Family]
    unassigned: int
    """Kept launches in no forward."""


def _mode(values: list[int]) -> int:
    """Most common value; ties go to the smaller value."""
    c = Counter(values)
    return min(c, key=lambda v: (-c[v], v))


def _stretches(req: Sequence[int], owner: Sequence[int]) -> list[tuple[int, int]]:
    """Maximal ``[s, e)`` runs of unowned positions inside one request."""
    out = []
    n = len(req)
    i = 0
    while i < n:
        if owner[i] >= 0:
            i += 1
            continue
        j = i + 1
        while j < n and owner[j] < 0 and req[j] == req[i]:
            j += 1
        out.append((i, j))
        i = j
    return out


def _choose_anchor(ids: Sequence[int], stretches: list[tuple[int, int]], exclude: set[int]) -> list[int]:
    """Anchor candidates, best first (see the module docstring)."""
    dists: dict[int, list[int]] = defaultdict(list)
    in_stretches: dict[int, int] = defaultdict(int)
    first_seen: dict[int, int] = {}
    total = 0
    for s, e in stretches:
        total += e - s
        last: dict[int, int] = {}
        for i in range(s, e):
            k = ids[i]
            first_seen.setdefault(k, i)
            p = last.get(k)
            if p is not None:
                dists[k].append(i - p)
            else:
                in_stretches[k] += 1
            last[k] = i
    cands = [k for k in dists if k not in exclude]
    if not cands or not total:
        return []
    period = {k: statistics.median(dists[k]) for k in cands}

    def covered(k: int) -> float:  # launches in forward-sized segments, one more per stretch
        p = period[k]
        return min(1.0, (sum(d for d in dists[k] if p / 2 <= d <= 2 * p) + p * in_stretches[k]) / total)

    cover = {k: covered(k) for k in cands}
    best = max(cover.values())
    good = [k for k in cands if cover[k] >= 0.9 * best]
    longest = max(period[k] for k in good)
    good = [k for k in good if period[k] >= longest / 2]
    return sorted(good, key=lambda k: (-cover[k], first_seen[k]))


def _setup_ids(ids: Sequence[int], stretches: list[tuple[int, int]], ends: list[list[int]],
               first_start) -> set[int]:
    """Identities seen between a forward's end and the next start kernel (setup, resets): a
    forward inside a stretch that lacks the start kernel begins after such launches."""
    setup: set[int] = set()
    for (s, _), en in zip(stretches, ends):
        prev = s - 1
        for k, end in enumerate(en):
            st = first_start(prev + 1, end + 1)
            if st is not None and k > 0:
                setup.update(ids[i] for i in range(prev + 1, st))
            prev = end
    return setup


def _cut_family(anchor: int, ids: Sequence[int], stretches: list[tuple[int, int]], req_end: Sequence[int],
                req: Sequence[int], starts: Sequence[int] | None = None):
    """Forward spans ``(start, end, regular)`` for one anchor, with (tail, start identity, between).
    ``starts``: the class each launch is recognised by as a start kernel (default: its identity)."""
    anchor_ids = ids
    ids = ids if starts is None else starts
    occ: list[list[int]] = []
    for s, e in stretches:
        occ.append([i for i in range(s, e) if anchor_ids[i] == anchor])
    # tail: launches after the last anchor occurrence up to the end of the request
    tails = [e - 1 - o[-1] for (s, e), o in zip(stretches, occ) if o and e == req_end[req[s]]]
    if not tails:
        tails = [e - 1 - o[-1] for (s, e), o in zip(stretches, occ) if o]
    if not tails:
        return None
    tail = _mode(tails)
    ends: list[list[int]] = [[i + tail for i in o if i + tail < e] for (s, e), o in zip(stretches, occ)]

    # start kernel: present in >= 90 % of interior segments, earliest median first offset
    first_off: dict[int, list[int]] = defaultdict(list)
    interior = 0
    for en in ends:
        for a, b in zip(en, en[1:]):
            interior += 1
            seen: set[int] = set()
            for i in range(a + 1, b + 1):
                k = ids[i]
                if k not in seen:
                    seen.add(k)
                    first_off[k].append(i - a - 1)
    start_id = None
    if interior:
        present = [k for k, offs in first_off.items() if len(offs) >= 0.9 * interior]
        if present:
            start_id = min(present, key=lambda k: (statistics.median(first_off[k]), k))

    spans: list[tuple[int, int, bool]] = []
    between = 0

    def first_start(lo: int, hi: int) -> int | None:  # first start-kernel position in [lo, hi)
        for i in range(lo, hi):
            if ids[i] == start_id:
                return i
        return None

    setup = _setup_ids(ids, stretches, ends, first_start) if start_id is not None else set()
    for (s, e), en in zip(stretches, ends):
        prev = s - 1
        for k, end in enumerate(en):
            if start_id is None:
                spans.append((prev + 1, end + 1, True))
            else:
                st = first_start(prev + 1, end + 1)
                if st is None and k == 0:
                    # no start kernel at the stretch's start: a truncated forward
                    spans.append((prev + 1, end + 1, False))
                elif st is None:
                    # inside a stretch, a forward whose start kernel differs (cuBLAS picks
                    # GEMM kernels by size): it begins after the setup launches
                    st = prev + 1
                    while st < end and ids[st] in setup:
                        st += 1
                    between += st - prev - 1
                    spans.append((st, end + 1, True))
                else:
                    between += st - prev - 1
                    spans.append((st, end + 1, True))
            prev = end
        if en and start_id is not None and prev + 1 < e:
            st = first_start(prev + 1, e)
            if st is not None:  # the capture ends inside a forward
                spans.append((st, e, False))
    if start_id is not None and starts is not None:  # report an identity, not the class
        firsts = [s for s, _, ok in spans if ok and ids[s] == start_id]
        start_id = anchor_ids[firsts[0]] if firsts else None
    return spans, tail, start_id, between


def cut_passes(
    t: Sequence[int],
    ids: Sequence[int],
    gap_ns: int = 5_000_000,
    max_families: int = 16,
    starts: Sequence[int] | None = None,
) -> Passes:
    """Requests, families and forwards of the kept launches (see the module docstring);
    ``starts``: per launch, the class it is recognised by as a start kernel (kern-mine passes
    the kernel name's; default: the identity)."""
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
    req_end = [e for _, e in requests]

    owner = [-1] * n
    families: list[Family] = []
    forwards: list[Forward] = []
    scale: float | None = None  # median forward length of the first family
    tried: set[int] = set()
    while len(families) < max_families:
        stretches = _stretches(req, owner)
        made = False
        for anchor in _choose_anchor(ids, stretches, tried)[:4]:
            tried.add(anchor)
            cut = _cut_family(anchor, ids, stretches, req_end, req, starts)
            if cut is None:
                continue
            spans, tail, start_id, between = cut
            regular = [e - s for s, e, ok in spans if ok]
            seqs = Counter(tuple(ids[s:e]) for s, e, ok in spans if ok)
            if len(regular) < 2 or statistics.median(regular) < 2 or max(seqs.values()) < 2:
                continue
            if scale is not None and statistics.median(regular) < scale / 4:
                continue
            if scale is None:
                scale = statistics.median(regular)
            fam = Family(len(families), anchor, tail, start_id, between, [])
            for s, e, ok in spans:
                k = len(forwards)
                forwards.append(Forward(k, req[s], fam.index, s, e, ok))
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
