"""Call sites: majority alignment of the regular forwards of a family (DESIGN §4, step 3).

Contract:

* Forwards are compared by their *key* sequence: a launch's key is its kernel identity,
  except for launches whose arguments are a packed ``extra`` buffer (an opaque library call,
  e.g. a cuBLAS GEMM): the library picks the kernel from the problem shape, so one call site
  shows different kernels at different token counts; all such launches share one key.  The
  runtime calls the library itself at such a site, so the kernel is not part of the site.
* Regular forwards of one family are grouped by *template*: a forward joins the first
  template (taken in order of how many forwards share it exactly) whose key sequence it
  matches to at least ``min_match`` (matched launches / the longer of the two sequences);
  otherwise it starts a new template.  The most common exact sequence is therefore the
  majority template, and a forward whose cut boundary jittered by a launch or two, or that
  carries a few foreign launches, still joins it.
* Each forward is aligned to its template with a longest-matching-blocks alignment
  (``difflib``); template position ``j`` is the **call site** ``(identity, occurrence)``
  where ``occurrence`` counts earlier template positions with the same identity.  Launches of
  a forward that align to nothing are *extra*, template positions a forward lacks are
  *missing*; both are counted per forward.
* Replayability of a site (from its launches): ``extra`` (arguments passed in the packed
  ``extra`` buffer), ``unreadable`` (no parameter layout), ``aggregate`` (a parameter wider
  than 8 bytes holds device pointers: a by-value struct with pointers inside), else ``flat``
  (separate scalars and pointers; wide parameters without pointers are by-value blobs,
  counted in ``blob_params``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from difflib import SequenceMatcher

import msgspec

from .capture_format import Launch
from .passes import Forward

__all__ = ["EXTRA_KEY", "Group", "Site", "group_forwards", "group_sites", "launch_keys", "replayability"]

EXTRA_KEY = -1
"""The alignment key of every launch whose arguments are a packed ``extra`` buffer."""


def launch_keys(kept_ids: Sequence[int], launches: Sequence[Launch]) -> list[int]:
    """The alignment key of each kept launch (``kept_ids[i]`` is the identity of ``launches[i]``)."""
    return [EXTRA_KEY if x.args == "extra" else k for k, x in zip(kept_ids, launches)]


class Group(msgspec.Struct):
    """Forwards sharing one template, with each forward's launch per template position."""

    index: int
    family: int
    template: list[int]
    """Keys of the template's launches (identity ids; ``EXTRA_KEY`` for packed-extra launches)."""
    forwards: list[int]
    """Forward indices (``Passes.forwards``) in call order."""
    slots: list[list[int | None]]
    """Per forward (parallel to ``forwards``), the kept position at each template position."""
    extra: list[int]
    missing: list[int]


class Site(msgspec.Struct):
    """A call site of a group: template position, identity and occurrence."""

    group: int
    pos: int
    ident: int
    """The identity seen most often at this position."""
    occurrence: int
    launches: list[int | None]
    """Capture launch index per forward of the group (None where the forward lacks it)."""
    idents: list[int] = []
    """Every identity seen at this position (more than one only at library-call sites)."""


def _skip_align(a: Sequence[int], b: Sequence[int], window: int = 8) -> list[tuple[int, int]] | None:
    """A linear-time alignment for sequences that differ by a few scattered insertions (e.g. a
    library-inserted reduction missing at some token counts): walk both, and on a mismatch skip
    the fewest launches (at most ``window``) of one side after which two launches match again.
    Returns the matched pairs if every launch of the shorter sequence matched (then no
    alignment matches more), else None (the caller falls back to ``difflib``)."""
    n, m = len(a), len(b)
    short = min(n, m)
    if n - short > window * 64 or m - short > window * 64:
        return None
    i = j = 0
    pairs: list[tuple[int, int]] = []
    while i < n and j < m:
        if a[i] == b[j]:
            pairs.append((i, j))
            i += 1
            j += 1
            continue
        for d in range(1, window + 1):
            if i + d < n and a[i + d] == b[j] and (i + d + 1 >= n or j + 1 >= m or a[i + d + 1] == b[j + 1]):
                i += d
                break
            if j + d < m and b[j + d] == a[i] and (j + d + 1 >= m or i + 1 >= n or b[j + d + 1] == a[i + 1]):
                j += d
                break
        else:
            return None
        if len(pairs) + min(n - i, m - j) < short:
            return None
    return pairs if len(pairs) == short else None


def _align(template: Sequence[int], seq: Sequence[int]) -> tuple[list[int | None], int]:
    """For each template position, the index into ``seq`` aligned to it; and the match count."""
    if list(template) == list(seq):
        return list(range(len(seq))), len(seq)
    out: list[int | None] = [None] * len(template)
    fast = _skip_align(template, seq)
    if fast is not None:  # every launch of the shorter sequence matched: a maximum alignment
        for a, b in fast:
            out[a] = b
        return out, len(fast)
    matched = 0
    sm = SequenceMatcher(None, template, seq, autojunk=False)
    for a, b, size in sm.get_matching_blocks():
        for k in range(size):
            out[a + k] = b + k
        matched += size
    return out, matched


def group_forwards(
    forwards: Sequence[Forward],
    keys: Sequence[int],
    min_match: float = 0.9,
    max_shift: int = 2,
) -> list[Group]:
    """Templates and alignments of the regular forwards of every family.

    Boundary repair: where two forwards of one template touch (one ends where the next
    starts), the cut is moved by up to ``max_shift`` launches either way if that aligns more
    launches of the pair to the template (the majority decides where a jittered launch
    belongs).  Repaired forwards have their ``start``/``end`` updated in place."""
    regular = [f for f in forwards if f.regular]
    seqs = {f.index: tuple(keys[f.start:f.end]) for f in regular}
    freq = Counter(seqs.values())
    order = sorted(seqs, key=lambda k: (-freq[seqs[k]], k))
    by_index = {f.index: f for f in regular}
    templates: list[tuple[int, tuple[int, ...], list[int]]] = []  # (family, template, members)
    bags: dict[tuple[int, ...], Counter[int]] = {}

    def bag(seq: tuple[int, ...]) -> Counter[int]:
        if seq not in bags:
            bags[seq] = Counter(seq)
        return bags[seq]

    for k in order:
        f = by_index[k]
        seq = seqs[k]
        for fam, tpl, members in templates:
            if fam == f.family:
                need = min_match * max(len(tpl), len(seq))
                # the multiset overlap bounds the alignment's match count: skip the alignment
                # (quadratic on dissimilar sequences) when even the bound falls short
                b1, b2 = bag(tpl), bag(seq)
                if sum(min(c, b2[x]) for x, c in b1.items()) < need:
                    continue
                _, matched = _align(tpl, seq)
                if matched >= need:
                    members.append(k)
                    break
        else:
            templates.append((f.family, seq, [k]))

    for _, tpl, members in templates:
        members.sort()
        for a_i, b_i in zip(members, members[1:]):
            a, b = by_index[a_i], by_index[b_i]
            if a.end != b.start:
                continue
            def score(cut: int) -> int:
                return (_align(tpl, keys[a.start:cut])[1] + _align(tpl, keys[cut:b.end])[1])
            base = score(a.end)
            if base == 2 * len(tpl):
                continue
            best, best_cut = base, a.end
            for s in range(-max_shift, max_shift + 1):
                cut = a.end + s
                if s and a.start < cut < b.end:
                    sc = score(cut)
                    if sc > best:
                        best, best_cut = sc, cut
            a.end = b.start = best_cut

    groups: list[Group] = []
    for fam, tpl, members in templates:
        g = Group(0, fam, list(tpl), [], [], [], [])
        for k in members:
            f = by_index[k]
            seq = keys[f.start:f.end]
            slots, matched = _align(tpl, seq)
            g.forwards.append(k)
            g.slots.append([None if s is None else f.start + s for s in slots])
            g.extra.append(len(seq) - matched)
            g.missing.append(len(tpl) - matched)
        groups.append(g)
    groups.sort(key=lambda g: (g.family, g.forwards[0]))
    for i, g in enumerate(groups):
        g.index = i
    return groups


def group_sites(group: Group, kept: Sequence[int], kept_ids: Sequence[int]) -> list[Site]:
    """The call sites of a group, launch indices mapped to the capture's launch list."""
    seen: Counter[int] = Counter()
    sites = []
    for j, key in enumerate(group.template):
        occ = seen[key]
        seen[key] += 1
        launches = [None if slots[j] is None else kept[slots[j]] for slots in group.slots]
        found = Counter(kept_ids[slots[j]] for slots in group.slots if slots[j] is not None)
        ident = min(found, key=lambda k: (-found[k], k))
        sites.append(Site(group.index, j, ident, occ, launches, sorted(found)))
    return sites


def replayability(launches: Sequence[Launch]) -> tuple[str, int]:
    """(``flat`` | ``extra`` | ``aggregate`` | ``unreadable``, number of by-value blob params),
    judged on the first launch that shows the worst case."""
    kind, blobs = "flat", 0
    rank = {"flat": 0, "aggregate": 1, "unreadable": 2, "extra": 3}
    for launch in launches:
        if launch.args == "extra":
            k = "extra"
        elif launch.params is None:
            k = "unreadable"
        elif any(p.size > 8 and p.ptrs for p in launch.params):
            k = "aggregate"
        else:
            k = "flat"
            blobs = max(blobs, sum(1 for p in launch.params if p.size > 8))
        if rank[k] > rank[kind]:
            kind = k
    return kind, blobs
