"""Pointer classes (DESIGN §4, step 3): an allocation range is not a logical buffer, so a
pointer is identified by ``(range_start, offset)`` and classified by its stability across the
forwards of a group:

* ``stable``   the same in every forward that has the site: a weight or persistent state
               (a KV cache).  Stable across several token counts is the strong claim; stable
               over forwards of one shape may also be an allocator handing the same activation
               address back (``distinct_tokens`` says which).
* ``changing`` differs between forwards: activation workspace.
* ``mixed``    the word was not a device address in some forwards (e.g. null, or a scalar that
               happened to look like an address once).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .results import PointerInfo
from .series import PtrSlot

__all__ = ["classify_pointer"]


def classify_pointer(slot: PtrSlot, tokens: Sequence[int | None], present: Sequence[bool]) -> PointerInfo:
    """Classifies one pointer slot over the forwards where the site is ``present``."""
    seen = [v for v, p in zip(slot.values, present) if p]
    addrs = [v for v in seen if v is not None]
    keys = Counter((v[0], v[2]) for v in addrs)
    if len(addrs) < len(seen):
        klass = "mixed"
    elif len(keys) == 1:
        klass = "stable"
    else:
        klass = "changing"
    first = addrs[0] if addrs else None
    toks = {t for t, v, p in zip(tokens, slot.values, present) if p and v is not None and t is not None}
    return PointerInfo(
        param=slot.param, at=slot.at, klass=klass,  # type: ignore[arg-type]
        range_start=first[0] if first else None, range_size=first[1] if first else None,
        offset=first[2] if first else None, distinct=len(keys), forwards=len(seen),
        distinct_tokens=len(toks),
    )
